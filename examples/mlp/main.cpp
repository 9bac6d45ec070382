// examples/mlp: trains the MLP classifier on a deterministic synthetic data set across
// the processes it is launched on, with the sharding, precision and optimizer chosen on
// the command line (or by a DeepSpeed config), and writes a JSON report.
//   mpiexec -n 4 mlp --zero 2 --precision bf16 --optimizer adamw --steps 20 --report r.json
#include <cstdio>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "../common/loop.hpp"
#include "model.hpp"

namespace {

template <class Sharding, class Optimizer, class Precision>
int run(strata::environment& env, const mlp::shape_config& shape, const examples::loop_options& lo,
        const strata::trainer_options& opts, const examples::config_choice& cc) {
  strata::grid g(env.world(), {});
  const int ranks = g.dp_size(), rank = g.dp_rank();
  lo.validate(ranks, opts.micro_batches);
  strata::trainer<mlp::model, strata::host, Sharding, Optimizer, Precision> tr(g, mlp::make_model(shape), opts,
                                                                              cc.optimizer<Optimizer>());
  mlp::synthetic_data data(shape, lo.seed);
  const long local = lo.batch / ranks;
  const auto r = examples::train_loop(tr, lo, env.rank(), [&](long step, strata::batch<>& b) {
    data.fill(static_cast<std::uint64_t>(step * lo.batch + rank * local), local, b);
  });
  if (rank == 0) {
    std::printf("final loss %.6f  weights_hash %s  policy %s/%s/%s  ranks %d  params %zu\n",
                static_cast<double>(r.last.loss), r.hash.c_str(), Sharding::name, Optimizer::name, Precision::name,
                ranks, r.master.size());
    auto j = examples::base_report(tr, r);
    j["policy"] = {{"sharding", Sharding::name}, {"optimizer", Optimizer::name}, {"precision", Precision::name}};
    j["ranks"] = ranks;
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
    lo.read(a, 20, 64);
    strata::runtime_policies pol;
    pol.zero_stage = static_cast<int>(a.integer("zero", 0));
    pol.offload = a.flag("offload");
    pol.precision = a.str("precision", "fp32");
    pol.optimizer = a.str("optimizer", "adamw");
    mlp::shape_config shape;
    shape.features = static_cast<int>(a.integer("features", 32));
    shape.hidden = static_cast<int>(a.integer("hidden", 64));
    shape.layers = static_cast<int>(a.integer("layers", 3));
    shape.classes = static_cast<int>(a.integer("classes", 10));
    strata::trainer_options opts;
    opts.micro_batches = static_cast<int>(a.integer("micro-batches", 1));
    opts.lr = static_cast<float>(a.real("lr", 1e-3));
    opts.max_grad_norm = static_cast<float>(a.real("clip", 0.0));
    opts.seed = lo.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 4096));
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "mlp", env.rank(), env.size(), pol, opts, lo.batch);
    a.check_all_used();
    opts.validate();
    return strata::dispatch(pol, [&](auto s, auto o, auto p) {
      return run<typename decltype(s)::type, typename decltype(o)::type, typename decltype(p)::type>(env, shape, lo,
                                                                                                     opts, cc);
    });
  } catch (const strata::error& e) {
    if (env.rank() == 0) std::fprintf(stderr, "mlp: error: %s\n", e.what());
    return 2;
  }
}
