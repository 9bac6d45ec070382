// bench/train: training speed of the gpt example's model and of Qwen2 on the host, at three sizes each:
// tokens/s, achieved GFLOP/s (model FLOPs: 6 per param per token plus attention's,
// observe/flops.hpp) and the share of the step spent in GEMMs. One process, fp32, AdamW,
// the threads of OMP_NUM_THREADS, OpenBLAS's kernels fitted to the CPU (OPENBLAS_CORETYPE,
// as the examples set it; space/host_threads.hpp). bench/peers/torch_train.py trains the same models in
// PyTorch for the ratio (the README shows both).
//   bench/train [--models gpt,qwen2] [--sizes S,M,L] [--steps N (5)] [--warmup W (2)]
//   bench/train --device cuda [...]   GPT-2 124M's shape on one GPU (train_device.cu)
// The sizes are in the usage below; gpt's M is the configuration the host speed work was tuned on (3,454,464
// params), qwen2's S the demo's model. Lookup tables (token and position embeddings) are left out of the FLOPs.
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <strata/strata.hpp>
#include <string>
#include <vector>

#include "../examples/common/args.hpp"
#include "../examples/common/device.hpp"
#include "../examples/common/loop.hpp"
#include "../examples/gpt/model.hpp"
#include "device_entry.hpp"

// Every GEMM strata runs goes through cblas_sgemm: this definition in the executable
// takes the calls, times them and hands them to the BLAS's own (dlsym RTLD_NEXT).
namespace {
std::atomic<long long> gemm_ns{0};
using sgemm_fn = void (*)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float, const float*,
                          blasint, const float*, blasint, float, float*, blasint);
}  // namespace

extern "C" void cblas_sgemm(const CBLAS_ORDER order, const CBLAS_TRANSPOSE ta, const CBLAS_TRANSPOSE tb,
                            const blasint m, const blasint n, const blasint k, const float alpha, const float* a,
                            const blasint lda, const float* b, const blasint ldb, const float beta, float* c,
                            const blasint ldc) {
  static const auto real = reinterpret_cast<sgemm_fn>(dlsym(RTLD_NEXT, "cblas_sgemm"));
  if (!real) {
    std::fprintf(stderr, "bench/train: the BLAS's cblas_sgemm was not found (dlsym RTLD_NEXT)\n");
    std::abort();
  }
  const auto t0 = std::chrono::steady_clock::now();
  real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  gemm_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
}

namespace {

const char* usage =
    "usage: bench/train [--models gpt,qwen2] [--sizes S,M,L] [--steps N] [--warmup W] [--profile]\n"
    "  Trains each model (one process, fp32, AdamW) at each size and prints tokens/s, achieved\n"
    "  GFLOP/s and the share of step time in GEMMs (medians over N steps after W warm-up steps).\n"
    "  gpt (dim/layers/heads/seq/vocab, batch x micro-batches): S 128/2/4/64/256 32x2,\n"
    "    M 256/4/8/128/512 16x2, L 512/6/8/256/1024 8x2.\n"
    "  qwen2 (hidden/intermediate/layers/heads/kv heads/seq/vocab, tied embeddings): S the demo's\n"
    "    128/352/4/8/2/64/258 32x2, M 256/704/4/8/2/128/512 16x2, L 512/1408/6/8/2/256/1024 8x2.\n"
    "  --profile: after each row, where the median step's time went (each layer kind's forward and\n"
    "    backward, the gradient norm, the optimizer, waits, the rest; trainer_options::profile).\n"
    "  Threads: OMP_NUM_THREADS.\n"
    "  --device cuda: GPT-2 124M's shape on one GPU in mixed<bf16> (train --device cuda --help).\n";

struct size_spec {
  const char* name;
  int dim, ffn, layers, heads, kv_heads, seq, vocab;
  long batch;
  int micro_batches;
};

const size_spec gpt_sizes[] = {
    {"S", 128, 512, 2, 4, 4, 64, 256, 32, 2},
    {"M", 256, 1024, 4, 8, 8, 128, 512, 16, 2},
    {"L", 512, 2048, 6, 8, 8, 256, 1024, 8, 2},
};
const size_spec qwen2_sizes[] = {
    {"S", 128, 352, 4, 8, 2, 64, 258, 32, 2},
    {"M", 256, 704, 4, 8, 2, 128, 512, 16, 2},
    {"L", 512, 1408, 6, 8, 2, 256, 1024, 8, 2},
};

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// One row of the table: `lookups` params (embedding tables) do no FLOPs.
template <class Trainer>
void measure(const char* model, const size_spec& z, Trainer& tr, double lookups, long steps, long warmup) {
  std::vector<strata::step_profile> profiles;
  gpt::synthetic_tokens data(gpt::config{.vocab = z.vocab, .seq = z.seq}, 5);
  strata::batch<> b;
  std::vector<double> seconds, gemm_share;
  for (long s = 0; s < warmup + steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s * z.batch), z.batch, b);
    const long long before = gemm_ns.load();
    const double t = tr.step(b).seconds;
    if (s < warmup) continue;
    seconds.push_back(t);
    if (!tr.last_profile().parts.empty()) profiles.push_back(tr.last_profile());
    gemm_share.push_back(static_cast<double>(gemm_ns.load() - before) * 1e-9 / t);
  }
  const double params = examples::full_param_count(tr) - lookups;
  const double tokens = static_cast<double>(z.batch) * z.seq;
  const double flops_per_token = strata::train_flops_per_token(params, z.layers, z.dim, z.seq);
  const double t = median(seconds);
  std::printf("%-6s %-4s %4d %6d %5d %5d %5d %10.0f %7ld %9.1f %10.0f %9.2f %8.1f\n", model, z.name, z.dim, z.layers,
              z.heads, z.seq, z.vocab, params, z.batch, t * 1e3, tokens / t, flops_per_token * tokens / t * 1e-9,
              100 * median(gemm_share));
  if (!profiles.empty()) {
    std::printf("# profile of %s %s, the median step:\n%s", model, z.name,
                strata::profile_table(strata::median_step_profile(profiles), "#   ").c_str());
  }
  std::fflush(stdout);
}

bool profile = false;  // --profile

strata::trainer_options options_for(const size_spec& z) {
  strata::trainer_options opts;
  opts.profile = profile;
  opts.micro_batches = z.micro_batches;
  opts.schedule = strata::lr_schedule::constant(1e-3);
  return opts;
}

void run_gpt(strata::environment& env, const size_spec& z, long steps, long warmup) {
  strata::grid g(env.world());
  const gpt::config cfg{.vocab = z.vocab, .seq = z.seq, .dim = z.dim, .heads = z.heads, .layers = z.layers};
  strata::trainer<gpt::model, strata::host, strata::replicated, strata::adamw, strata::fp32> tr(g, gpt::make_model(cfg),
                                                                                                options_for(z));
  measure("gpt", z, tr, gpt::lookup_params(cfg), steps, warmup);
}

void run_qwen2(strata::environment& env, const size_spec& z, long steps, long warmup) {
  strata::grid g(env.world());
  strata::models::qwen2_config cfg;
  cfg.vocab_size = z.vocab;
  cfg.hidden_size = z.dim;
  cfg.intermediate_size = z.ffn;
  cfg.num_hidden_layers = z.layers;
  cfg.num_attention_heads = z.heads;
  cfg.num_key_value_heads = z.kv_heads;
  cfg.max_position_embeddings = 2 * z.seq;
  cfg.tie_word_embeddings = true;
  strata::trainer<strata::models::qwen2, strata::host, strata::replicated, strata::adamw, strata::fp32> tr(
      g, strata::models::make_qwen2(cfg), options_for(z));
  measure("qwen2", z, tr, static_cast<double>(z.vocab) * z.dim, steps, warmup);
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string n; std::getline(ss, n, ',');) out.push_back(n);
  return out;
}

const size_spec& size_named(const size_spec (&sizes)[3], const std::string& n) {
  for (const auto& z : sizes)
    if (n == z.name) return z;
  throw examples::usage_error("--sizes: '" + n + "' is not one of S, M, L");
}

}  // namespace

int main(int argc, char** argv) {
  if (strata_bench::take_device("train", argc, argv) == strata_bench::device_kind::cuda) {
#if STRATA_BENCH_HAS_CUDA
    return strata_bench::run_train_cuda(argc, argv);
#else
    strata_bench::exit_no_cuda("train");
#endif
  }
  examples::use_fitting_blas_kernels(argv);  // as the examples run
  return examples::run_main("bench/train", usage, 0, argc, argv, [&]() -> int {
    examples::args a(argc, argv, {"profile"});
    profile = a.flag("profile");
    const auto models = split(a.str("models", "gpt,qwen2"));
    const auto names = split(a.str("sizes", "S,M,L"));
    const long steps = a.integer("steps", 5, 1), warmup = a.integer("warmup", 2, 0);
    a.check_all_used();
    for (const auto& m : models)
      if (m != "gpt" && m != "qwen2") throw examples::usage_error("--models: '" + m + "' is not one of gpt, qwen2");
    for (const auto& n : names) (void)size_named(gpt_sizes, n);
    strata::environment env(argc, argv);
    strata::expects<strata::config_error>(env.size() == 1, "bench/train runs as one process");
    std::printf("# bench/train: on the host, fp32, AdamW, %d thread%s (%s), median of %ld steps after %ld\n",
                strata::host_threads().threads, strata::host_threads().threads == 1 ? "" : "s",
                strata::host_threads().blas.c_str(), steps, warmup);
    std::printf("%-6s %-4s %4s %6s %5s %5s %5s %10s %7s %9s %10s %9s %8s\n", "model", "size", "dim", "layers", "heads",
                "seq", "vocab", "params", "batch", "step ms", "tokens/s", "GFLOP/s", "GEMM %");
    for (const auto& m : models)
      for (const auto& n : names) {
        if (m == "gpt") run_gpt(env, size_named(gpt_sizes, n), steps, warmup);
        if (m == "qwen2") run_qwen2(env, size_named(qwen2_sizes, n), steps, warmup);
      }
    return 0;
  });
}
