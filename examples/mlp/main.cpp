// examples/mlp: trains the MLP classifier on a deterministic synthetic data set across
// the processes it is launched on, with the sharding, precision and optimizer chosen on
// the command line (or by a DeepSpeed config), on CPUs or GPUs, and writes a JSON report.
//   mpiexec -n 4 mlp --zero 2 --precision bf16 --optimizer adamw --steps 20 --report r.json
//   mpiexec -n 2 mlp --device cuda --zero 3 --offload
#include <cstdio>
#include <strata/strata.hpp>
#include <string>

#include "run.hpp"

namespace {
const std::string usage =
    std::string(
        "usage: mpiexec -n N mlp [options]\n"
        "Trains a small MLP classifier on synthetic data, data parallel with any ZeRO stage.\n"
        "  --zero 0..3 [--offload]  --precision fp32|bf16|fp16  --optimizer adamw|sgd|lion  --clip C\n"
        "  --offload-param  ZeRO-3: parameter shards in host memory on a GPU (DeepSpeed's offload_param)\n"
        "  --features F --hidden H --layers L --classes C  --bucket ELEMS\n") +
    examples::common_usage;
}  // namespace

int main(int argc, char** argv) {
  examples::become_device_binary(argc, argv);
  const auto started = examples::start_environment("mlp", argc, argv);
  strata::environment& env = *started;
  return examples::run_main("mlp", usage.c_str(), env.rank(), argc, argv, [&] {
    examples::args a(argc, argv, {"offload", "offload-param", "quiet", "profile"});
    const std::string device = examples::read_device(a);
    examples::loop_options lo;
    lo.read(a, 20, 64);
    strata::runtime_policies pol;
    pol.zero_stage = a.count("zero", 0, 0);
    pol.offload = a.flag("offload");
    pol.precision = a.str("precision", "fp32");
    pol.optimizer = a.str("optimizer", "adamw");
    mlp::shape_config shape;
    shape.features = a.count("features", 32);
    shape.hidden = a.count("hidden", 64);
    shape.layers = a.count("layers", 3, 0);
    shape.classes = a.count("classes", 10);
    strata::trainer_options opts;
    opts.micro_batches = a.count("micro-batches", 1);
    opts.lr = static_cast<float>(a.real("lr", 1e-3));
    opts.max_grad_norm = static_cast<float>(a.real("clip", 0.0));
    opts.seed = lo.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 4096, 1));
    opts.offload_params = a.flag("offload-param");
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "mlp", env.rank(), env.size(), pol, opts, lo.batch);
    a.check_all_used();
    opts.profile = lo.profile;
    opts.validate();
    const mlp::run_args ra{env, shape, lo, opts, cc, pol};
    return examples::run_on(
        device,
        [&](auto space) {
#ifdef STRATA_TEST_FAULT_INJECTION
          // The fault-injection build (tests/examples/checkpoint_kill.sh) trains AdamW in
          // fp32 only: 7 trainers to compile instead of 63.
          strata::expects<strata::config_error>(pol.optimizer == "adamw" && pol.precision == "fp32",
                                                "the fault-injection build trains AdamW in fp32 only");
          return strata::dispatch_sharding(pol, [&](auto s) {
            return mlp::run<decltype(space), typename decltype(s)::type, strata::adamw, strata::fp32>(ra);
          });
#else
          return strata::dispatch(pol, [&](auto s, auto o, auto p) {
            return mlp::run<decltype(space), typename decltype(s)::type, typename decltype(o)::type,
                            typename decltype(p)::type>(ra);
          });
#endif
        },
        [&](auto) { return mlp::run_cuda(ra); });
  });
}
