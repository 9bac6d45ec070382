// bench/train --device cuda: the gpt example's model at GPT-2 124M's shape (12 layers, 768
// wide, 12 heads, seq 1024, vocab 50257) trained on one GPU in mixed<bf16> with AdamW and
// zero<1>: tokens/s and MFU, model FLOPs (6 per param per token plus attention's,
// observe/flops.hpp) over the device's dense 16-bit peak (observe/gpu_peaks.hpp).
// scripts/gpu-check runs it beside bench/optimizer's fused-AdamW-vs-copy and
// bench/collectives' NCCL-vs-raw ratios, into one file. Linked into bench/train (whose
// main() is in train.cpp) where the build has CUDA.
//
//   train --device cuda [--steps 5] [--warmup 2] [--batch 8] [--micro-batches 1] [--seq 1024] [--layers 12]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <strata/cuda.cuh>
#include <strata/observe/gpu_peaks.hpp>

#include "../examples/common/loop.hpp"
#include "../examples/gpt/model.hpp"
#include "device_entry.hpp"

namespace {

struct options {
  int steps = 5, warmup = 2, batch = 8, micro_batches = 1, seq = 1024, layers = 12;
};

[[noreturn]] void usage(const std::string& why) {
  strata_bench::exit_usage(why == "help" ? why : "train --device cuda: " + why,
                           "usage: train --device cuda [--steps N] [--warmup W] [--batch B] [--micro-batches M] "
                           "[--seq S] [--layers L]\n"
                           "  Trains the gpt example's model at GPT-2 124M's shape (768 wide, 12 heads, vocab 50257;\n"
                           "  12 layers and seq 1024 unless given) on one GPU in mixed<bf16>, AdamW, zero<1>, and\n"
                           "  prints tokens/s and MFU (medians over N steps after W).\n");
}

options parse(int argc, char** argv) {
  options o;
  strata_bench::parse_int_options(argc, argv,
                                  {{"--steps", o.steps},
                                   {"--warmup", o.warmup},
                                   {"--batch", o.batch},
                                   {"--micro-batches", o.micro_batches},
                                   {"--seq", o.seq},
                                   {"--layers", o.layers}},
                                  usage);
  if (o.steps < 1 || o.batch < 1 || o.micro_batches < 1 || o.seq < 1 || o.layers < 1)
    usage("--steps, --batch, --micro-batches, --seq and --layers must be at least 1");
  if (o.batch % o.micro_batches != 0) usage("--batch must be a multiple of --micro-batches");
  return o;
}

}  // namespace

namespace strata_bench {

int run_train_cuda(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (const auto gpu = strata::probe_cuda(); !gpu.usable)
    return no_gpu_status("train --device cuda", gpu.absent, strata::gpu_required(), gpu.reason);
  try {
    strata::environment env(argc, argv);
    strata::expects<strata::config_error>(env.size() == 1, "bench/train --device cuda runs as one process");
    strata::select_device(env.local_rank());
    cudaDeviceProp prop{};
    STRATA_CHECK_CUDA(cudaGetDeviceProperties(&prop, strata::current_device()));
    const double peak = strata::gpu_peak_flops(prop.name, true);

    const gpt::config cfg{.vocab = 50257, .seq = o.seq, .dim = 768, .heads = 12, .layers = o.layers};
    strata::grid g(env.world());
    strata::trainer_options opts;
    opts.micro_batches = o.micro_batches;
    opts.schedule = strata::lr_schedule::constant(3e-4);
    strata::trainer<gpt::model, strata::cuda, strata::zero<1>, strata::adamw, strata::mixed<strata::bf16>> tr(
        g, gpt::make_model(cfg), opts);
    gpt::synthetic_tokens data(cfg, 5);
    strata::batch<> b;
    std::vector<double> seconds;
    float first_loss = 0, last_loss = 0;
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      data.fill(static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(o.batch), o.batch, b);
      const auto st = tr.step(b);  // its time includes the device work (the trainer synchronizes)
      if (s == 0) first_loss = st.loss;
      last_loss = st.loss;
      if (s >= o.warmup) seconds.push_back(st.seconds);
    }
    const double params = examples::full_param_count(tr) - gpt::lookup_params(cfg);  // the head is untied
    const double tokens = static_cast<double>(o.batch) * o.seq;
    const double flops = strata::train_flops_per_token(params, cfg.layers, cfg.dim, cfg.seq) * tokens;
    const double t = median(seconds);
    std::printf("# bench/train --device cuda: %s, gpt mixed<bf16> AdamW zero<1>, median of %d steps after %d\n",
                prop.name, o.steps, o.warmup);
    std::printf(
        "# GEMMs: bf16 operands on tensor cores, fp32 accumulation; compute params and activations stored in bf16; "
        "params: those that multiply (no embedding tables)\n");
    std::printf("%-6s %6s %4s %5s %5s %6s %11s %6s %9s %10s %9s %7s %10s\n", "model", "layers", "dim", "heads", "seq",
                "vocab", "params", "batch", "step ms", "tokens/s", "TFLOP/s", "MFU %", "loss");
    char mfu[32] = "n/a";
    if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.1f", 100 * flops / t / peak);
    std::printf("%-6s %6d %4d %5d %5d %6d %11.0f %6d %9.1f %10.0f %9.1f %7s %4.2f->%4.2f\n", "gpt", cfg.layers, cfg.dim,
                cfg.heads, cfg.seq, cfg.vocab, params, o.batch, t * 1e3, tokens / t, flops / t * 1e-12, mfu, first_loss,
                last_loss);
    if (peak == 0) std::printf("# MFU: %s is not in observe/gpu_peaks.hpp's table of dense 16-bit peaks\n", prop.name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train --device cuda: %s\n", e.what());
    return 1;
  }
}

}  // namespace strata_bench
