// examples/gpt: a small decoder-only transformer trained on a synthetic token stream on a
// tensor x data x pipeline grid, with any ZeRO stage and pipeline schedule.
//   mpiexec -n 4 gpt --tp 2 --pp 2 --zero 1 --schedule 1f1b --micro-batches 4 --steps 10 --report r.json
#include <cstdio>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "../common/loop.hpp"
#include "model.hpp"

namespace {

template <class Sharding, class Schedule>
int run(strata::environment& env, const gpt::config& model, int tp, int pp, const examples::loop_options& lo,
        const strata::trainer_options& opts, const examples::config_choice& cc) {
  strata::grid g(env.world(), {.tensor = tp, .pipeline = pp});
  const int dp = g.dp_size();
  lo.validate(dp, opts.micro_batches);
  strata::trainer<gpt::model, strata::host, Sharding, strata::adamw, strata::fp32, Schedule> tr(
      g, gpt::make_model(model, g.tp_rank(), g.tp_size()), opts, cc.optimizer<strata::adamw>());
  gpt::synthetic_tokens data(model, lo.seed);
  const long local = lo.batch / dp;
  const auto r = examples::train_loop(tr, lo, env.rank(), [&](long step, strata::batch<>& b) {
    data.fill(static_cast<std::uint64_t>(step * lo.batch + g.dp_rank() * local), local, b);
  });
  // The pipeline's idle fraction, averaged over ranks.
  double fraction = r.step_seconds > 0 ? r.idle_seconds / r.step_seconds : 0;
  env.world().all_reduce(std::span<double>(&fraction, 1), strata::reduce_op::avg);
  if (env.rank() == 0) {
    std::printf("final loss %.6f  weights_hash %s  tp %d dp %d pp %d  %s/%s  idle %.3f  params %zu\n",
                static_cast<double>(r.last.loss), r.hash.c_str(), tp, dp, pp, Sharding::name, Schedule::name, fraction,
                r.master.size());
    auto j = examples::base_report(tr, r);
    j["pipeline_idle_fraction"] = fraction;
    j["layout"] = {{"tp", tp}, {"dp", dp}, {"pp", pp}, {"zero", Sharding::name}, {"schedule", Schedule::name}};
    examples::write_report(lo.report, j);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  try {
    examples::args a(argc, argv, {"offload", "quiet"});
    examples::loop_options lo;
    lo.read(a, 10, 8);
    strata::runtime_policies pol;
    pol.zero_stage = static_cast<int>(a.integer("zero", 0));
    pol.offload = a.flag("offload");
    pol.schedule = a.str("schedule", "1f1b");
    int tp = static_cast<int>(a.integer("tp", 1)), pp = static_cast<int>(a.integer("pp", 1));
    gpt::config model;
    model.layers = static_cast<int>(a.integer("layers", 2));
    model.dim = static_cast<int>(a.integer("dim", 32));
    model.heads = static_cast<int>(a.integer("heads", 4));
    model.vocab = static_cast<int>(a.integer("vocab", 64));
    model.seq = static_cast<int>(a.integer("seq", 16));
    strata::trainer_options opts;
    opts.micro_batches = static_cast<int>(a.integer("micro-batches", 2));
    opts.lr = static_cast<float>(a.real("lr", 3e-3));
    opts.seed = lo.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 1 << 14));
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "gpt", env.rank(), env.size(), pol, opts, lo.batch, &tp, &pp);
    a.check_all_used();
    opts.validate();
    strata::expects<strata::config_error>(pol.optimizer == "adamw" && pol.precision == "fp32", [&] {
      return strata::detail::cat("gpt trains with AdamW in fp32; the config asks for ", pol.optimizer, " in ", pol.precision);
    });
    return strata::dispatch_sharding_schedule(pol, [&](auto s, auto sc) {
      return run<typename decltype(s)::type, typename decltype(sc)::type>(env, model, tp, pp, lo, opts, cc);
    });
  } catch (const strata::error& e) {
    if (env.rank() == 0) std::fprintf(stderr, "gpt: error: %s\n", e.what());
    return 2;
  }
}
