// examples/mlp: trains the MLP classifier on a deterministic synthetic data set across
// the processes it is launched on, with the sharding, precision and optimizer chosen on
// the command line, and writes a JSON report (final loss, weights hash, memory).
//   mpiexec -n 4 mlp --zero 2 --precision bf16 --optimizer adamw --steps 20 --report r.json
#include <cstdio>
#include <fstream>
#include <iostream>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "model.hpp"

namespace {

struct run_config {
  mlp::shape_config shape;
  long steps = 20;
  long batch = 64;  // global batch: rows per step over all ranks
  std::uint64_t seed = 1;
  std::string report, save, load, export_path, init_path;
  long save_every = 0;
  bool quiet = false;
};

template <class Sharding, class Optimizer, class Precision>
int run(strata::environment& env, const run_config& rc, const strata::trainer_options& opts,
        const examples::config_choice& cc) {
  strata::grid g(env.world(), {});
  const int ranks = g.dp_size(), rank = g.dp_rank();
  strata::expects<strata::config_error>(
      rc.batch % (static_cast<long>(ranks) * opts.micro_batches) == 0,
      strata::detail::cat("--batch ", rc.batch, " must be divisible by processes x micro-batches = ", ranks, " x ",
                          opts.micro_batches));
  strata::trainer<mlp::model, strata::host, Sharding, Optimizer, Precision> tr(g, mlp::make_model(rc.shape), opts,
                                                                              cc.optimizer<Optimizer>());
  mlp::synthetic_data data(rc.shape, rc.seed);
  const long local = rc.batch / ranks;
  strata::batch<> b;
  strata::step_stats last;
  std::vector<float> losses;
  long first = 0;
  if (!rc.init_path.empty()) strata::import_safetensors(tr, rc.init_path);
  if (!rc.load.empty()) {
    // --steps counts from step 0: a step-10 checkpoint with --steps 20 runs 10 more.
    tr.load(rc.load);
    first = tr.steps_done();
    if (rank == 0) std::printf("resumed from step %ld of %s\n", first, rc.load.c_str());
  }
  for (long s = first; s < rc.steps; ++s) {
    // The data position is the step: sample rows are a function of (seed, row index).
    data.fill(static_cast<std::uint64_t>(s * rc.batch + rank * local), local, b);
    last = tr.step(b);
    losses.push_back(last.loss);
    if (rank == 0 && !rc.quiet) std::printf("%s\n", strata::progress_line(last, rc.steps).c_str());
    const bool periodic = rc.save_every > 0 && (s + 1) % rc.save_every == 0;
    if (!rc.save.empty() && (periodic || s + 1 == rc.steps))
      tr.save(rc.save, {{"data_position", (s + 1) * rc.batch}});
  }
  if (!rc.export_path.empty()) strata::export_safetensors(tr, rc.export_path);
  const auto master = tr.gather_master();
  const std::string hash = strata::hex64(strata::weights_hash(master));
  if (rank == 0) {
    std::printf("final loss %.6f  weights_hash %s  policy %s/%s/%s  ranks %d  params %zu\n",
                static_cast<double>(last.loss), hash.c_str(), Sharding::name, Optimizer::name, Precision::name, ranks,
                master.size());
  }
  if (!rc.report.empty() && rank == 0) {
    nlohmann::json j;
    j["final_loss"] = last.loss;
    j["losses"] = losses;
    j["weights_hash"] = hash;
    j["skipped_steps"] = tr.skipped_steps();
    j["memory"] = tr.memory().to_json();
    j["policy"] = {{"sharding", Sharding::name}, {"optimizer", Optimizer::name}, {"precision", Precision::name}};
    j["ranks"] = ranks;
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
    pol.precision = a.str("precision", "fp32");
    pol.optimizer = a.str("optimizer", "adamw");
    rc.steps = a.integer("steps", 20);
    rc.batch = a.integer("batch", 64);
    rc.seed = static_cast<std::uint64_t>(a.integer("seed", 1));
    rc.report = a.str("report", "");
    rc.quiet = a.flag("quiet");
    rc.save = a.str("save", "");
    rc.load = a.str("load", "");
    rc.save_every = a.integer("save-every", 0);
    rc.export_path = a.str("export", "");
    rc.init_path = a.str("init", "");
    rc.shape.features = static_cast<int>(a.integer("features", 32));
    rc.shape.hidden = static_cast<int>(a.integer("hidden", 64));
    rc.shape.layers = static_cast<int>(a.integer("layers", 3));
    rc.shape.classes = static_cast<int>(a.integer("classes", 10));
    strata::trainer_options opts;
    opts.micro_batches = static_cast<int>(a.integer("micro-batches", 1));
    opts.lr = static_cast<float>(a.real("lr", 1e-3));
    opts.max_grad_norm = static_cast<float>(a.real("clip", 0.0));
    opts.seed = rc.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 4096));
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "mlp", env.rank(), env.size(), pol, opts, rc.batch);
    a.check_all_used();
    strata::expects<strata::config_error>(rc.steps >= 0, strata::detail::cat("--steps ", rc.steps, " is negative"));
    strata::expects<strata::config_error>(rc.batch > 0, strata::detail::cat("--batch ", rc.batch, " must be positive"));
    opts.validate();
    return strata::dispatch(pol, [&](auto s, auto o, auto p) {
      return run<typename decltype(s)::type, typename decltype(o)::type, typename decltype(p)::type>(env, rc, opts, cc);
    });
  } catch (const strata::error& e) {
    if (env.rank() == 0) std::fprintf(stderr, "mlp: error: %s\n", e.what());
    return 2;
  }
}
