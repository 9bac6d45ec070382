// strata-ranks: 1 2 4
// The trainer's numbers: N ranks match one process on the same global batch, K
// micro-batches match one K-times larger batch, the clipped global norm is the
// single-process norm, overflow skips a step everywhere, and memory follows the formulas.
#include <atomic>
#include <limits>
#include <strata/train/memory_plan.hpp>

#include "catch.hpp"
#include "mlp_run.hpp"
#include "poisoned_mlp.hpp"

using namespace strata;

namespace {

// One process's view: a grid over a size-1 communicator split off the world.
struct single_process {
  world_comm self;
  grid<world_comm> g;
  explicit single_process(world_comm& world) : self(world.split(world.rank(), 0)), g(self) {}
};

}  // namespace

TEST_CASE("N ranks and one process give the same weights for the same global batch") {
  environment env;
  grid g(env.world());
  single_process one(env.world());
  test::mlp_setup s;
  s.steps = 20;
  s.opts.micro_batches = 2;
  const auto many = test::run_mlp<zero<2>>(g, s);
  const auto single = test::run_mlp<replicated>(one.g, s);
  // Only the order of the gradient sums differs (a few float ulps per step); AdamW
  // normalises updates, so that stays near 1e-7 relative after 20 steps.
  const double d = test::relative_distance(many.master, single.master);
  INFO("relative distance " << d);
  CHECK(d < 1e-5);
  for (std::size_t i = 0; i < many.stats.size(); ++i)
    CHECK(many.stats[i].loss == Approx(single.stats[i].loss).epsilon(1e-5));
}

TEST_CASE("K micro-batches equal one K-times larger batch") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.global_batch = 64;
  s.steps = 10;
  s.opts.micro_batches = 1;
  const auto big = test::run_mlp<zero<1>, sgd>(g, s);
  s.opts.micro_batches = 4;
  const auto split = test::run_mlp<zero<1>, sgd>(g, s);
  // Same gradient, summed in another order: float rounding only.
  const double d = test::relative_distance(split.master, big.master);
  INFO("relative distance " << d);
  CHECK(d < 1e-6);
  CHECK(split.stats.back().loss == Approx(big.stats.back().loss).epsilon(1e-5));
}

TEST_CASE("the clipped global norm is the single-process norm") {
  environment env;
  grid g(env.world());
  single_process one(env.world());
  test::mlp_setup s;
  s.steps = 3;
  s.opts.max_grad_norm = 0.05f;  // well below the observed norms (~0.3): clipping is active
  const auto many = test::run_mlp<zero<3>, sgd>(g, s);
  const auto single = test::run_mlp<replicated, sgd>(one.g, s);
  for (std::size_t i = 0; i < many.stats.size(); ++i) {
    CHECK(many.stats[i].grad_norm > s.opts.max_grad_norm);
    CHECK(many.stats[i].grad_norm == Approx(single.stats[i].grad_norm).epsilon(1e-5));
  }
  CHECK(test::relative_distance(many.master, single.master) < 1e-5);
  // Clipping shrank the steps: SGD moved the weights far less than without clipping
  // (by about max_norm / norm, here under a half).
  test::mlp_setup unclipped = s, start = s;
  unclipped.opts.max_grad_norm = 0;
  start.steps = 0;
  const auto w0 = test::run_mlp<zero<3>, sgd>(g, start).master;
  const auto free_run = test::run_mlp<zero<3>, sgd>(g, unclipped).master;
  const double clipped_move = test::relative_distance(many.master, w0);
  const double free_move = test::relative_distance(free_run, w0);
  INFO("moved " << clipped_move << " clipped, " << free_move << " unclipped");
  CHECK(clipped_move < 0.5 * free_move);
}

// ---- overflow: a layer that poisons its gradient on one rank at one step ----------
// (tests/support/poisoned_mlp.hpp)
using test::backward_calls;
using test::make_poisoned;
using test::poison_call;
using test::poison_calls;
using test::poison_rank;
using test::poison_value;

TEST_CASE("fp16: an inf gradient on one rank skips the step on every rank and halves the scale") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 6;
  s.opts.loss_scaler.hysteresis = 1;  // DeepSpeed semantics: with hysteresis h, the h-th overflow halves
  poison_rank = g.dp_size() - 1;      // the last rank only
  poison_call = 3;                    // backward of step 4 (one micro-batch per step)
  backward_calls = 0;
  const auto r = test::run_mlp<zero<2>, adamw, mixed<fp16>>(g, s, make_poisoned(s.shape));
  poison_rank = -1;
  REQUIRE(r.skipped == std::vector<long>{4});
  CHECK(r.stats[3].skipped);
  CHECK(r.stats[3].loss_scale == 65536.0f);
  CHECK(r.stats[4].loss_scale == 32768.0f);
  CHECK_FALSE(r.stats[4].skipped);
  // The skipped step changed nothing: a run that stops before it and one that stops
  // after it (with the poisoned step skipped) differ only by the later steps, and a
  // 3-step run equals the poisoned 4-step run's weights.
  test::mlp_setup three = s;
  three.steps = 3;
  backward_calls = 0;
  const auto before = test::run_mlp<zero<2>, adamw, mixed<fp16>>(g, three, make_poisoned(s.shape));
  test::mlp_setup four = s;
  four.steps = 4;
  poison_rank = g.dp_size() - 1;
  backward_calls = 0;
  const auto at = test::run_mlp<zero<2>, adamw, mixed<fp16>>(g, four, make_poisoned(s.shape));
  poison_rank = -1;
  CHECK(at.hash == before.hash);
}

TEST_CASE("fp32: a NaN gradient is a reported, skipped step, never trained on") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 3;
  poison_value = std::numeric_limits<float>::quiet_NaN();
  poison_rank = 0;
  poison_call = 1;
  backward_calls = 0;
  const auto r = test::run_mlp<zero<1>>(g, s, make_poisoned(s.shape));
  poison_rank = -1;
  poison_value = std::numeric_limits<float>::infinity();
  CHECK(r.skipped == std::vector<long>{2});
  for (float w : r.master) REQUIRE(std::isfinite(w));
  // Where: the poisoned param, named on every rank (its gradient is on rank 0 alone).
  CHECK(r.stats[1].nonfinite_param == "poison.w");
  CHECK(r.stats[0].nonfinite_param.empty());
}

// A static loss scale cannot make a gradient finite again: skipped steps in a row end
// the run (every rank throws at the same step), and the message says which steps, the
// loss and the scale; a lone skipped step does not.
TEST_CASE("fp32: max_consecutive_skips skipped steps in a row end the run with what happened") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 12;
  poison_value = std::numeric_limits<float>::quiet_NaN();
  poison_rank = g.dp_size() - 1;  // one rank's gradient only
  auto run = [&](long first_call, long calls, int limit) {
    poison_call = first_call;
    poison_calls = calls;
    backward_calls = 0;
    s.opts.max_consecutive_skips = limit;
    std::string what;
    test::mlp_result r;
    try {
      r = test::run_mlp<zero<2>>(g, s, make_poisoned(s.shape));
    } catch (const strata::error& e) {
      what = e.what();
    }
    return std::pair{what, r};
  };
  // From step 3 on every step's gradient is NaN: the default 5 ends the run at step 7.
  auto [what, r] = run(2, 100, 5);
  CHECK_THAT(what, strata_test::contains_text("step 7: no update for 5 steps in a row (steps 3-7)") &&
                       strata_test::contains_text("; the first in poison.w) at the static loss scale 1 of fp32") &&
                       strata_test::contains_text("The loss is finite, so the backward pass overflows") &&
                       strata_test::contains_text("max_consecutive_skips (5; 0: never stop)"));
  // 0: skipped for ever, as before, and never trained on.
  std::tie(what, r) = run(2, 100, 0);
  CHECK(what.empty());
  CHECK(r.skipped == std::vector<long>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  // One bad step among good ones is skipped and the run goes on; at a limit of 1 it ends it.
  std::tie(what, r) = run(4, 1, 2);
  CHECK(what.empty());
  CHECK(r.skipped == std::vector<long>{5});
  std::tie(what, r) = run(4, 1, 1);
  CHECK_THAT(what, strata_test::contains_text("step 5: no update for 1 steps in a row (steps 5-5)"));
  poison_rank = -1;
  poison_calls = 1;
  poison_value = std::numeric_limits<float>::infinity();
}

TEST_CASE("the memory report follows the ZeRO formulas") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 1;
  const std::size_t N = static_cast<std::size_t>(g.dp_size());
  auto check = [&](auto tag, int stage, bool offload, int slots, std::size_t wire) {
    using S = typename decltype(tag)::type;
    trainer<mlp::model, host, S> tr(g, mlp::make_model(s.shape), s.opts);
    const auto& plan = tr.plan();
    // Two slots: the largest bucket of each parity (bucket_plan::slot_elems).
    const std::size_t psi = plan.total(), S_ = plan.shard_size(), B2 = plan.slot_elems();
    // Padding: each bucket rounds up to N * 16 elements, nothing more.
    std::size_t raw = 0;
    for (const auto& p : tr.layout().params()) raw += p.numel;
    CHECK(psi >= raw);
    CHECK(psi - raw <= plan.buckets().size() * (N * 16 + 64 * 8));
    CHECK(S_ * N == psi);
    const auto m = tr.memory();
    const std::size_t f = sizeof(float);
    CHECK(m.bytes.at("params") == f * (stage < 3 ? psi : S_ + B2));
    CHECK(m.bytes.at("grads") == f * (B2 + S_));  // two slots and the shard at every stage
    CHECK(m.bytes.at("master") == f * (stage == 0 ? psi : S_));
    CHECK(m.bytes.at("optimizer_states") == f * slots * (stage == 0 ? psi : S_));
    CHECK(m.bytes.at("comm_buffers") == wire * (B2 / N));
    CHECK(m.offloaded.at("master") == offload);
    CHECK(m.offloaded.at("optimizer_states") == offload);
    CHECK_FALSE(m.offloaded.at("params"));
  };
  check(type_tag<replicated>{}, 0, false, 2, 4);
  check(type_tag<zero<1>>{}, 1, false, 2, 4);
  check(type_tag<zero<2>>{}, 2, false, 2, 4);
  check(type_tag<zero<3>>{}, 3, false, 2, 4);
  check(type_tag<zero<2, offload_optimizer>>{}, 2, true, 2, 4);
  check(type_tag<zero<3, offload_optimizer>>{}, 3, true, 2, 4);
}

// DeepSpeed's offload_param: a GPU trainer keeps ZeRO-3's param shard in host memory and
// holds only the two live buckets on the device; the host trainer's params are already in
// host memory, so there it changes nothing, not a bit; any other stage is refused.
TEST_CASE("parameter offload: ZeRO-3 only, the shard leaves the device, nothing moves on the host") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 3;
  const auto plain = test::run_mlp<zero<3>>(g, s);
  s.opts.offload_params = true;
  const auto off = test::run_mlp<zero<3>>(g, s);
  CHECK(off.hash == plain.hash);
  CHECK(off.memory.bytes == plain.memory.bytes);
  CHECK_THROWS_WITH((trainer<mlp::model, host, zero<2>>(g, mlp::make_model(s.shape), s.opts)),
                    strata_test::contains_text("offload_params (zero_optimization.offload_param) needs ZeRO stage 3"));
  // strata.rounding = stochastic is refused where it would round (mixed precision), not
  // ignored; fp32 has no 16-bit copy to round.
  test::mlp_setup r;
  r.opts.rounding = strata::rounding::stochastic;
  CHECK_THROWS_WITH(
      (trainer<mlp::model, host, zero<1>, adamw, mixed<bf16>>(g, mlp::make_model(r.shape), r.opts)),
      strata_test::contains_text("rounding = stochastic (the config's strata.rounding) is not supported"));
  CHECK_NOTHROW(trainer<mlp::model, host, zero<1>>(g, mlp::make_model(r.shape), r.opts));

  trainer<mlp::model, host, zero<3>> tr(g, mlp::make_model(s.shape), s.opts);
  const std::size_t S_ = tr.plan().shard_size(), B2 = tr.plan().slot_elems(), f = sizeof(float);
  for (bool offload : {false, true}) {
    INFO("offload_optimizer " << offload);
    plan_layout l;
    l.dp = g.dp_size();
    l.zero_stage = 3;
    l.offload = offload;
    l.device = true;
    l.bucket_elems = s.opts.bucket_elems;
    auto m = mlp::make_model(s.shape);
    const memory_report on_device = plan_memory(m, l, 0, 0);
    l.offload_params = true;
    const memory_report moved = plan_memory(m, l, 0, 0);
    CHECK(on_device.bytes.at("params") == f * (S_ + B2));
    CHECK(on_device.bytes.count("param_shard") == 0);
    CHECK(moved.bytes.at("params") == f * B2);
    CHECK(moved.bytes.at("param_shard") == f * S_);
    CHECK(moved.offloaded.at("param_shard"));
    CHECK_FALSE(moved.offloaded.at("params"));
    CHECK(moved.in_space(false) == on_device.in_space(false) - f * S_);
    // With the optimizer offloaded too, the rounded params are written into the shard
    // where it lives: the staging keeps only the grad shard on its way to the host.
    if (offload) CHECK(moved.bytes.at("offload_staging") == on_device.bytes.at("offload_staging") - f * S_);
    CHECK(moved.total() == on_device.total() - (offload ? f * S_ : 0));
    // In mixed precision a GPU trainer's compute params are 16-bit: both halves halve.
    l.mixed = true;
    const memory_report half = plan_memory(m, l, 0, 0);
    CHECK(half.bytes.at("params") == 2 * B2);
    CHECK(half.bytes.at("param_shard") == 2 * S_);
    // The host trainer's plan does not move it: nothing there is off the host, and its
    // compute params stay fp32 (BLAS multiplies floats).
    l.device = false;
    const memory_report host_plan = plan_memory(m, l, 0, 0);
    CHECK(host_plan.bytes.count("param_shard") == 0);
    CHECK(host_plan.bytes.at("params") == f * (S_ + B2));
  }
}

TEST_CASE("a step allocates nothing once the first step has sized the buffers") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  trainer<mlp::model, host, zero<3>> tr(g, mlp::make_model(s.shape), s.opts);
  mlp::synthetic_data data(s.shape, s.seed);
  strata::batch<> b;
  data.fill(0, s.global_batch / g.dp_size(), b);
  tr.step(b);
  tr.step(b);
  const auto before = host::counters().allocations.load();
  tr.step(b);
  CHECK(host::counters().allocations.load() == before);
}

TEST_CASE("bad input to the trainer is a clear error") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.opts.micro_batches = 0;
  CHECK_THROWS_WITH((trainer<mlp::model, host, zero<1>>(g, mlp::make_model(s.shape), s.opts)),
                    strata_test::contains_text("micro_batches (gradient_accumulation_steps) must be >= 1, got 0"));
  s.opts.micro_batches = 3;
  trainer<mlp::model, host, zero<1>> tr(g, mlp::make_model(s.shape), s.opts);
  strata::batch<> b;
  mlp::synthetic_data(s.shape, 1).fill(0, 8, b);
  CHECK_THROWS_WITH(tr.step(b),
                    strata_test::contains_text("the batch has 8 rows, which 3 micro-batches do not divide"));
  s.opts.micro_batches = 1;
  s.opts.lr = -1;
  CHECK_THROWS_WITH((trainer<mlp::model, host, zero<1>>(g, mlp::make_model(s.shape), s.opts)),
                    strata_test::contains_text("lr must be finite and >= 0, got -1"));
}
