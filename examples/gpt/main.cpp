// examples/gpt: a small decoder-only transformer trained on a synthetic token stream on a
// tensor x data x pipeline grid, with any ZeRO stage and pipeline schedule.
//   mpiexec -n 4 gpt --tp 2 --pp 2 --zero 1 --schedule 1f1b --micro-batches 4 --steps 10 --report r.json
//   mpiexec -n 2 gpt --device cuda --tp 2 --zero 1   (one GPU per process; pp 1 on GPUs so far)
#include <cstdio>
#include <strata/strata.hpp>
#include <string>

#include "run.hpp"

namespace {
const std::string usage =
    std::string(
        "usage: mpiexec -n N gpt [options]\n"
        "Trains a small decoder-only transformer on a synthetic token stream on a tensor x data x\n"
        "pipeline grid.\n"
        "  --tp T --pp P  --zero 0..3 [--offload]  --schedule 1f1b|gpipe\n"
        "  --layers L --dim D --heads H --vocab V --seq S  --bucket ELEMS\n") +
    examples::common_usage;
}  // namespace

int main(int argc, char** argv) {
  examples::become_device_binary(argc, argv);
  const auto started = examples::start_environment("gpt", argc, argv);
  strata::environment& env = *started;
  return examples::run_main("gpt", usage.c_str(), env.rank(), argc, argv, [&] {
    examples::args a(argc, argv, {"offload", "quiet", "profile"});
    const std::string device = examples::read_device(a);
    examples::loop_options lo;
    lo.read(a, 10, 8);
    strata::runtime_policies pol;
    pol.zero_stage = a.count("zero", 0, 0);
    pol.offload = a.flag("offload");
    pol.schedule = a.str("schedule", "1f1b");
    int tp = a.count("tp", 1), pp = a.count("pp", 1);
    gpt::config model;
    model.layers = a.count("layers", 2);
    model.dim = a.count("dim", 32);
    model.heads = a.count("heads", 4);
    model.vocab = a.count("vocab", 64);
    model.seq = a.count("seq", 16);
    lo.tokens_per_sample = model.seq;  // progress in tokens/s
    strata::trainer_options opts;
    opts.micro_batches = a.count("micro-batches", 2);
    opts.lr = static_cast<float>(a.real("lr", 3e-3));
    opts.seed = lo.seed;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 1 << 14, 1));
    opts.schedule = strata::lr_schedule::constant(opts.lr);
    const auto cc = examples::apply_config(a, "gpt", env.rank(), env.size(), pol, opts, lo.batch, &tp, &pp);
    a.check_all_used();
    opts.profile = lo.profile;
    opts.validate();
    strata::expects<strata::config_error>(pol.optimizer == "adamw" && pol.precision == "fp32", [&] {
      return strata::cat("gpt trains with AdamW in fp32; the config asks for ", pol.optimizer, " in ", pol.precision);
    });
    const gpt::run_args ra{env, model, tp, pp, lo, opts, cc, pol};
    return examples::run_on(
        device,
        [&](auto space) {
          return strata::dispatch_sharding_schedule(pol, [&](auto s, auto sc) {
            return gpt::run<decltype(space), typename decltype(s)::type, typename decltype(sc)::type>(ra);
          });
        },
        [&](auto) { return gpt::run_cuda(ra); });
  });
}
