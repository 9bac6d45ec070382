// bench/train --device cuda: on one GPU in mixed<bf16> with AdamW and zero<1>, the gpt
// example's model at GPT-2 124M's shape (12 layers, 768 wide, 12 heads, seq 1024, vocab
// 50257) and Qwen2 at Qwen2.5-0.5B's shape (24 layers, 896 wide, 14 heads over 2 KV
// heads, intermediate 4864, vocab 151936, tied embeddings; seq 1024): tokens/s and MFU,
// model FLOPs (6 per param per token plus attention's, observe/flops.hpp) over the
// device's dense 16-bit peak (observe/gpu_peaks.hpp). scripts/bench runs it on a GPU (and
// scripts/gpu-check through it), beside the PyTorch peers at the same shapes where torch
// is there. Linked into bench/train (whose main() is in train.cpp) where the build has
// CUDA.
//
//   train --device cuda [--models gpt,qwen2] [--steps 5] [--warmup 2] [--batch 8] [--micro-batches 1]
//                       [--seq 1024] [--layers L]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <strata/cuda.cuh>
#include <strata/models/qwen2.hpp>
#include <strata/observe/gpu_peaks.hpp>

#include "../examples/common/loop.hpp"
#include "../examples/gpt/model.hpp"
#include "device_entry.hpp"

namespace {

struct options {
  int steps = 5, warmup = 2, batch = 8, micro_batches = 1, seq = 1024;
  int layers = 0;  // 0: each model's own (gpt 12, qwen2 24)
  bool profile = false;
  std::vector<std::string> models{"gpt", "qwen2"};
};

[[noreturn]] void usage(const std::string& why) {
  strata_bench::exit_usage(
      why == "help" ? why : "train --device cuda: " + why,
      "usage: train --device cuda [--models gpt,qwen2] [--steps N] [--warmup W] [--batch B] [--micro-batches M]\n"
      "                           [--seq S] [--layers L] [--profile]\n"
      "  Trains on one GPU in mixed<bf16>, AdamW, zero<1>, and prints tokens/s and MFU (medians over\n"
      "  N steps after W): gpt at GPT-2 124M's shape (768 wide, 12 heads, vocab 50257, 12 layers) and\n"
      "  qwen2 at Qwen2.5-0.5B's (896 wide, 14 heads, 2 KV heads, intermediate 4864, vocab 151936,\n"
      "  tied, 24 layers); seq 1024 and batch 8 unless given, --layers for both. --profile: after each\n"
      "  row, where the median step's time went on the GPU (CUDA events on the compute stream).\n");
}

// --models takes a list; the rest are integers.
options parse(int argc, char** argv) {
  options o;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--profile") {
      o.profile = true;
      continue;
    }
    if (std::string_view(argv[i]) != "--models") {
      rest.push_back(argv[i]);
      continue;
    }
    if (i + 1 >= argc) usage("--models needs a list (gpt,qwen2)");
    o.models.clear();
    std::stringstream list(argv[++i]);
    for (std::string m; std::getline(list, m, ',');) {
      if (m != "gpt" && m != "qwen2") usage("--models: '" + m + "' is not one of gpt, qwen2");
      o.models.push_back(m);
    }
    if (o.models.empty()) usage("--models needs a list (gpt,qwen2)");
  }
  strata_bench::parse_int_options(static_cast<int>(rest.size()), rest.data(),
                                  {{"--steps", o.steps},
                                   {"--warmup", o.warmup},
                                   {"--batch", o.batch},
                                   {"--micro-batches", o.micro_batches},
                                   {"--seq", o.seq},
                                   {"--layers", o.layers}},
                                  usage);
  if (o.steps < 1 || o.batch < 1 || o.micro_batches < 1 || o.seq < 1)
    usage("--steps, --batch, --micro-batches and --seq must be at least 1");
  if (o.batch % o.micro_batches != 0) usage("--batch must be a multiple of --micro-batches");
  return o;
}

// What a row prints: the shape and the measured steps.
struct shape {
  const char* model;
  int layers, dim, heads, seq, vocab;
};

// Trains `steps` after `warmup` on the synthetic token stream (gpt's, with this vocab and
// seq) and prints one row; `lookups`: params that do no FLOPs (embedding tables).
template <class Trainer>
void measure(Trainer& tr, const shape& z, double lookups, const options& o, double peak) {
  gpt::synthetic_tokens data(gpt::config{.vocab = z.vocab, .seq = z.seq}, 5);
  strata::batch<> b;
  std::vector<double> seconds;
  std::vector<strata::step_profile> profiles;
  float first_loss = 0, last_loss = 0;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s) * static_cast<std::uint64_t>(o.batch), o.batch, b);
    const auto st = tr.step(b);  // its time includes the device work (the trainer synchronizes)
    if (s == 0) first_loss = st.loss;
    last_loss = st.loss;
    if (s >= o.warmup) seconds.push_back(st.seconds);
    if (s >= o.warmup && o.profile) profiles.push_back(tr.last_profile());
  }
  const double params = examples::full_param_count(tr) - lookups;
  const double tokens = static_cast<double>(o.batch) * z.seq;
  const double flops = strata::train_flops_per_token(params, z.layers, z.dim, z.seq) * tokens;
  const double t = strata_bench::median(seconds);
  char mfu[32] = "n/a";
  if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.1f", 100 * flops / t / peak);
  std::printf("%-6s %6d %4d %5d %5d %6d %11.0f %6d %9.1f %10.0f %9.1f %7s %4.2f->%4.2f\n", z.model, z.layers, z.dim,
              z.heads, z.seq, z.vocab, params, o.batch, t * 1e3, tokens / t, flops / t * 1e-12, mfu, first_loss,
              last_loss);
  if (!profiles.empty())
    std::printf("# profile of %s, the median step:\n%s", z.model,
                strata::profile_table(strata::median_step_profile(profiles), "#   ").c_str());
  std::fflush(stdout);
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

    std::printf("# bench/train --device cuda: %s, mixed<bf16> AdamW zero<1>, median of %d steps after %d\n", prop.name,
                o.steps, o.warmup);
    std::printf(
        "# GEMMs: bf16 operands on tensor cores, fp32 accumulation; compute params and activations stored in bf16; "
        "params: those that multiply (no embedding tables; a tied head counts once)\n");
    std::printf("%-6s %6s %4s %5s %5s %6s %11s %6s %9s %10s %9s %7s %10s\n", "model", "layers", "dim", "heads", "seq",
                "vocab", "params", "batch", "step ms", "tokens/s", "TFLOP/s", "MFU %", "loss");
    std::fflush(stdout);
    strata::grid g(env.world());
    strata::trainer_options opts;
    opts.micro_batches = o.micro_batches;
    opts.profile = o.profile;
    opts.schedule = strata::lr_schedule::constant(3e-4);
    for (const std::string& m : o.models) {
      if (m == "gpt") {
        const gpt::config cfg{
            .vocab = 50257, .seq = o.seq, .dim = 768, .heads = 12, .layers = o.layers ? o.layers : 12};
        strata::trainer<gpt::model, strata::cuda, strata::zero<1>, strata::adamw, strata::mixed<strata::bf16>> tr(
            g, gpt::make_model(cfg), opts);
        measure(tr, {"gpt", cfg.layers, cfg.dim, cfg.heads, cfg.seq, cfg.vocab}, gpt::lookup_params(cfg), o, peak);
      } else {
        strata::models::qwen2_config cfg;  // Qwen2.5-0.5B (examples/qwen2/configs/qwen2.5-0.5b.json)
        cfg.vocab_size = 151936;
        cfg.hidden_size = 896;
        cfg.intermediate_size = 4864;
        cfg.num_hidden_layers = o.layers ? o.layers : 24;
        cfg.num_attention_heads = 14;
        cfg.num_key_value_heads = 2;
        cfg.max_position_embeddings = std::max(32768, o.seq);
        cfg.rope_theta = 1e6;
        cfg.tie_word_embeddings = true;
        strata::trainer<strata::models::qwen2, strata::cuda, strata::zero<1>, strata::adamw,
                        strata::mixed<strata::bf16>>
            tr(g, strata::models::make_qwen2(cfg), opts);
        // The tied head is a second copy of the embedding in strata's params (docs/architecture.md,
        // "Tied params"): one table does no FLOPs, the head's copy multiplies.
        measure(tr, {"qwen2", cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, o.seq, cfg.vocab_size},
                static_cast<double>(cfg.vocab_size) * cfg.hidden_size, o, peak);
      }
    }
    if (peak == 0) std::printf("# MFU: %s is not in observe/gpu_peaks.hpp's table of dense 16-bit peaks\n", prop.name);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train --device cuda: %s\n", e.what());
    return 1;
  }
}

}  // namespace strata_bench
