// strata-ranks: 1 2
// strata-gloo-ranks: 2
// A profiled step says where its time went without changing what it computes: the same
// weights as an unprofiled run; a part for each layer kind's forward and backward, the
// gradient norm and the optimizer; parts that add up to the step's time within 5 %; and,
// with data-parallel ranks, the reduce-scatters and all-gathers ZeRO-2 makes.
#include <string>

#include "../support/small_models.hpp"
#include "catch.hpp"
#include "mlp_run.hpp"

using namespace strata;

namespace {

bool has(const std::vector<profile_part>& parts, const std::string& name) {
  for (const auto& p : parts)
    if (p.name == name) return true;
  return false;
}

}  // namespace

TEST_CASE("a profiled step: its parts, adding up to the step, and the same weights") {
  grid g(environment().world());
  test::mlp_setup s;
  s.shape = {64, 256, 4, 10};  // steps of a few milliseconds, so that 5 % is well above a clock read
  s.global_batch = 256;
  s.steps = 4;
  const auto plain = test::run_mlp<zero<2>>(g, s);

  s.opts.profile = true;
  trainer<mlp::model, host, zero<2>, adamw, fp32> tr(g, mlp::make_model(s.shape), s.opts);
  CHECK(tr.last_profile().parts.empty());  // nothing before a step
  mlp::synthetic_data data(s.shape, s.seed);
  const long local = s.global_batch / g.dp_size();
  batch<> b;
  for (long step = 0; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    const step_stats st = tr.step(b);
    const step_profile& p = tr.last_profile();
    INFO("step " << st.step << "\n" << profile_table(p));
    CHECK(p.step_seconds == st.seconds);
    double sum = 0;
    for (const auto& part : p.parts) {
      CHECK(part.seconds >= 0);
      sum += part.seconds;
    }
    CHECK(sum == Approx(p.timeline_seconds).epsilon(1e-12));
    CHECK_FALSE(p.host_waited_for_device);  // the host's step has no device to wait for
    // The marks open and close inside the step's clock: the timeline can only be shorter.
    CHECK(p.covered() <= 1.0);
    CHECK(p.covered() >= 0.95);
    for (const char* name : {"blocks forward", "blocks backward", "head forward", "head backward", "loss forward",
                             "loss backward", "gradient norm", "optimizer", "rest of the step"})
      CHECK(has(p.parts, name));
    if (g.dp_size() > 1) {
      CHECK(has(p.comm, "reduce_scatter"));
      CHECK(has(p.comm, "all_gather"));
      CHECK(has(p.parts, "waits"));
    }
  }
  CHECK(weights_hash(tr.gather_master()) == plain.hash);
}

TEST_CASE("a profiled Qwen2 step splits each decoder layer into attention and MLP, the head with its loss") {
  grid g(environment().world());
  trainer_options o;
  o.profile = true;
  trainer<models::qwen2, host, replicated, adamw, fp32> tr(g, models::make_qwen2(test::small_qwen2_config()), o);
  const std::int64_t rows = 2, seq = 16;
  batch<> b{tensor<float>(shape{rows, seq}), tensor<float>(shape{rows, seq})};
  for (std::int64_t i = 0; i < rows * seq; ++i) {
    b.inputs[i] = static_cast<float>((7 * i + 3) % 48);
    b.targets[i] = static_cast<float>((7 * i + 10) % 48);
  }
  tr.step(b);
  const step_profile& p = tr.last_profile();
  INFO(profile_table(p));
  for (const char* name : {"attn forward", "mlp forward", "attn backward", "mlp backward", "lm_head forward",
                           "lm_head backward", "embed_tokens forward", "optimizer"})
    CHECK(has(p.parts, name));
  double sum = 0;
  for (const auto& part : p.parts) sum += part.seconds;
  CHECK(sum == Approx(p.timeline_seconds).epsilon(1e-12));
}
