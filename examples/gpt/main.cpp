// examples/gpt: a small decoder-only transformer trained on a synthetic token stream on a
// tensor x data x pipeline grid, with any ZeRO stage and pipeline schedule.
//   mpiexec -n 4 gpt --tp 2 --pp 2 --zero 1 --schedule 1f1b --micro-batches 4 --steps 10 --report r.json
// --save DIR [--save-every N] writes checkpoints; --load DIR resumes at any layout.
#include <cstdio>
#include <fstream>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "model.hpp"

namespace {

struct run_config {
  gpt::config model;
  int tp = 1, pp = 1;
  long steps = 10, batch = 8;  // global batch: sequences per step over the data-parallel ranks
  std::uint64_t seed = 1;
  std::string report, save, load;
  long save_every = 0;
  bool quiet = false;
};

template <class Sharding, class Schedule>
int run(strata::environment& env, const run_config& rc, const strata::trainer_options& opts,
        const examples::config_choice& cc) {
  strata::grid g(env.world(), {.tensor = rc.tp, .pipeline = rc.pp});
  const int dp = g.dp_size();
  strata::expects<strata::config_error>(rc.batch % (static_cast<long>(dp) * opts.micro_batches) == 0, [&] {
    return strata::detail::cat("--batch ", rc.batch, " must be divisible by data-parallel ranks x micro-batches = ", dp,
                               " x ", opts.micro_batches);
  });
  strata::trainer<gpt::model, strata::host, Sharding, strata::adamw, strata::fp32, Schedule> tr(
      g, gpt::make_model(rc.model, g.tp_rank(), g.tp_size()), opts, cc.optimizer<strata::adamw>());
  gpt::synthetic_tokens data(rc.model, rc.seed);
  const long local = rc.batch / dp;
  strata::batch<> b;
  strata::step_stats last;
  std::vector<float> losses;
  double idle = 0, busy = 0;
  long first = 0;
  if (!rc.load.empty()) {
    // --steps counts from step 0: a step-10 checkpoint with --steps 20 runs 10 more.
    tr.load(rc.load);
    first = tr.steps_done();
    if (env.rank() == 0) std::printf("resumed from step %ld of %s\n", first, rc.load.c_str());
  }
  for (long s = first; s < rc.steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s * rc.batch + g.dp_rank() * local), local, b);
    last = tr.step(b);
    losses.push_back(last.loss);
    idle += last.idle_seconds;
    busy += last.seconds;
    if (env.rank() == 0 && !rc.quiet) std::printf("%s\n", strata::progress_line(last, rc.steps).c_str());
    const bool periodic = rc.save_every > 0 && (s + 1) % rc.save_every == 0;
    if (!rc.save.empty() && (periodic || s + 1 == rc.steps))
      tr.save(rc.save, {{"data_position", (s + 1) * rc.batch}});
  }
  // The pipeline's idle fraction, averaged over ranks.
  double fraction = busy > 0 ? idle / busy : 0;
  env.world().all_reduce(std::span<double>(&fraction, 1), strata::reduce_op::avg);
  const auto master = tr.gather_master();
  const std::string hash = strata::hex64(strata::weights_hash(master));
  if (env.rank() == 0)
    std::printf("final loss %.6f  weights_hash %s  tp %d dp %d pp %d  %s/%s  idle %.3f  params %zu\n",
                static_cast<double>(last.loss), hash.c_str(), rc.tp, dp, rc.pp, Sharding::name, Schedule::name, fraction,
                master.size());
  if (!rc.report.empty() && env.rank() == 0) {
    nlohmann::json j;
    j["final_loss"] = last.loss;
    j["losses"] = losses;
    j["weights_hash"] = hash;
    j["skipped_steps"] = tr.skipped_steps();
    j["memory"] = tr.memory().to_json();
    j["pipeline_idle_fraction"] = fraction;
    j["layout"] = {{"tp", rc.tp}, {"dp", dp}, {"pp", rc.pp}, {"zero", Sharding::name}, {"schedule", Schedule::name}};
    j["params"] = master.size();
    std::ofstream(rc.report) << j.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  try {
    examples::args a(argc, argv, {"offload", "quiet"});
    run_config rc;
    strata::runtime_policies pol;
    pol.zero_stage = static_cast<int>(a.integer("zero", 0));
    pol.offload = a.flag("offload");
    pol.schedule = a.str("schedule", "1f1b");
    rc.tp = static_cast<int>(a.integer("tp", 1));
    rc.pp = static_cast<int>(a.integer("pp", 1));
    rc.steps = a.integer("steps", 10);
    rc.batch = a.integer("batch", 8);
    rc.seed = static_cast<std::uint64_t>(a.integer("seed", 1));
    rc.report = a.str("report", "");
    rc.quiet = a.flag("quiet");
    rc.save = a.str("save", "");
    rc.load = a.str("load", "");
    rc.save_every = a.integer("save-every", 0);
    rc.model.layers = static_cast<int>(a.integer("layers", 2));
    rc.model.dim = static_cast<int>(a.integer("dim", 32));
    rc.model.heads = static_cast<int>(a.integer("heads", 4));
    rc.model.vocab = static_cast<int>(a.integer("vocab", 64));
    rc.model.seq = static_cast<int>(a.integer("seq", 16));
    strata::trainer_options opts;
    opts.micro_batches = static_cast<int>(a.integer("micro-batches", 2));
    opts.lr = static_cast<float>(a.real("lr", 3e-3));
    opts.seed = rc.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 1 << 14));
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "gpt", env.rank(), env.size(), pol, opts, rc.batch, &rc.tp, &rc.pp);
    a.check_all_used();
    strata::expects<strata::config_error>(rc.steps >= 0, [&] { return strata::detail::cat("--steps ", rc.steps, " is negative"); });
    opts.validate();
    strata::expects<strata::config_error>(pol.optimizer == "adamw" && pol.precision == "fp32", [&] {
      return strata::detail::cat("gpt trains with AdamW in fp32; the config asks for ", pol.optimizer, " in ", pol.precision);
    });
    return strata::dispatch_sharding_schedule(pol, [&](auto s, auto sc) {
      return run<typename decltype(s)::type, typename decltype(sc)::type>(env, rc, opts, cc);
    });
  } catch (const strata::error& e) {
    if (env.rank() == 0) std::fprintf(stderr, "gpt: error: %s\n", e.what());
    return 2;
  }
}
