// bench/optimizer: optimizer step throughput (params/s, GB/s) of the fused AdamW, SGD
// (momentum) and Lion host kernels against a STREAM triad measured in the same run.
//
//   optimizer [--device cpu] [--min-log2 20] [--max-log2 26] [--reps 5] [--threads 1,2]
//   optimizer --device cuda [--min-log2 20] [--max-log2 28] [--iters 20] [--warmup 3]
//
// --device cuda is the GPU path (optimizer_device.cu: fused AdamW and Lion against a
// device-to-device copy), linked in where the build has CUDA; the rest of this comment
// is about the host path.
//
// Every buffer is allocated and first-touched once (by the threads and schedule the
// kernels use), then reused by every size; each figure is the median of --reps timed
// runs after one warm-up, every kernel once a rep in turn (a ratio: the median of its
// ratios within reps). Bytes count what a step must move: fp32 AdamW reads p, g, m, v
// and writes p, m, v (28 B/param); SGD with momentum and Lion read p, g, buf and write
// p, buf (20 B); the triad a = b + s c reads b, c and writes a (12 B, STREAM's count).
// Mixed-precision AdamW (bf16, fp16) moves as many bytes: fp32 master and moments, a
// 16-bit grad read and a 16-bit param write; its "time / fp32" column is what the 16-bit
// conversions cost over fp32 AdamW of the same size and threads.
// "naive" is the same AdamW written as a plain loop over std::sqrt, the baseline that
// GCC's default -fmath-errno keeps scalar.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "device_entry.hpp"
#include "strata/core/buffer.hpp"
#include "strata/optim/adamw.hpp"
#include "strata/optim/lion.hpp"
#include "strata/optim/sgd.hpp"
#include "strata/space/host.hpp"

namespace {

struct options {
  int min_log2 = 20, max_log2 = 26, reps = 5;
  std::vector<int> threads = {1, 2};
};

[[noreturn]] void usage(const std::string& why) {
  strata_bench::exit_usage(why == "help" ? why : "optimizer: " + why,
                           "usage: optimizer [--device cpu] [--min-log2 N] [--max-log2 N] [--reps N] [--threads 1,2]\n"
                           "       optimizer --device cuda [--min-log2 N] [--max-log2 N] [--iters N] [--warmup N]\n");
}

int to_int(const char* flag, const char* s) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (!*s || *end || v < 0 || v > 1'000'000) usage(std::string(flag) + " wants a non-negative integer, got " + s);
  return static_cast<int>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "--min-log2")
      o.min_log2 = to_int("--min-log2", value());
    else if (a == "--max-log2")
      o.max_log2 = to_int("--max-log2", value());
    else if (a == "--reps")
      o.reps = to_int("--reps", value());
    else if (a == "--threads") {
      o.threads.clear();
      std::string s = value();
      for (std::size_t p = 0; p <= s.size();) {
        const std::size_t q = std::min(s.find(',', p), s.size());
        o.threads.push_back(to_int("--threads", s.substr(p, q - p).c_str()));
        p = q + 1;
      }
    } else if (a == "--help" || a == "-h")
      usage("help");
    else
      usage("unknown option " + std::string(a));
  }
  if (o.min_log2 < 10 || o.max_log2 > 30 || o.min_log2 > o.max_log2) usage("need 10 <= --min-log2 <= --max-log2 <= 30");
  if (o.reps < 1) usage("--reps must be >= 1");
  for (int t : o.threads)
    if (t < 1) usage("--threads wants counts >= 1");
  return o;
}

// Each stream starts at its own offset modulo 4 KiB (STREAM's OFFSET): large
// allocations all start at the same page offset, and streams whose i-th elements share
// address bits 0-11 make loads wait on unrelated stores (4K aliasing), which would slow
// the kernels and the triad by different amounts.
constexpr std::size_t stream_skew = 32;  // floats = 128 bytes; 32 streams fit in 4 KiB
constexpr std::size_t max_streams = 16;

// A host buffer (zero-filled, so touched, by its constructor) set to `value` by the
// threads and static schedule the kernels use; the stream is data() + skew.
struct stream {
  strata::buffer<float, strata::host> buf;
  float* p;
  float* data() { return p; }
};
stream touched(std::size_t n, float value, std::size_t index) {
  stream s{strata::buffer<float, strata::host>(n + stream_skew * max_streams), nullptr};
  s.p = s.buf.data() + stream_skew * index;
  float* p = s.p;
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) p[i] = value;
  return s;
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

double seconds(const std::function<void()>& run) {
  const auto t0 = std::chrono::steady_clock::now();
  run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The loop a user writes first: correct, but the sqrt's errno path keeps it scalar.
void naive_adamw(std::size_t n, float* p, const float* g, float* m, float* v, float lr, long step) {
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  const float bc1 = 1.0f - std::pow(b1, float(step)), bc2 = 1.0f - std::pow(b2, float(step));
#pragma omp parallel for schedule(static)
  for (std::size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] = p[i] * (1.0f - lr * wd) - lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
  }
}

struct row {
  const char* name;
  double bytes_per_param;
  std::function<void(std::size_t)> run;
};

}  // namespace

int main(int argc, char** argv) {
  if (strata_bench::take_device("optimizer", argc, argv) == strata_bench::device_kind::cuda) {
#if STRATA_BENCH_HAS_CUDA
    return strata_bench::run_optimizer_cuda(argc, argv);
#else
    strata_bench::exit_no_cuda("optimizer");
#endif
  }
  const options o = parse(argc, argv);
  const std::size_t cap = std::size_t{1} << o.max_log2;

  std::printf("bench/optimizer: device cpu, %d..%d log2 params, median of %d reps, OMP max threads %d\n", o.min_log2,
              o.max_log2, o.reps, omp_get_max_threads());
  // What the compiler was told: the point is ordinary flags, so say which.
#if defined(__NO_MATH_ERRNO__)
  const char* errno_mode = "off (-fno-math-errno or -ffast-math)";
#else
  const char* errno_mode = "on (the default: sqrt calls keep an errno path)";
#endif
#if defined(__AVX512F__)
  const char* simd = "AVX-512";
#elif defined(__AVX2__)
  const char* simd = "AVX2";
#elif defined(__AVX__)
  const char* simd = "AVX";
#elif defined(__SSE2__)
  const char* simd = "SSE2 (x86-64 baseline)";
#else
  const char* simd = "none known";
#endif
  std::printf("build: %s, math-errno %s, fast-math %s, widest SIMD %s\n", __VERSION__, errno_mode,
#if defined(__FAST_MATH__)
              "on",
#else
              "off",
#endif
              simd);
  // 9 float buffers and 4 16-bit ones: 44 bytes per param of the largest size.
  std::printf("allocating and touching %.2f GiB once...\n", double(cap) * 44 / (1 << 30));
  auto p = touched(cap, 0.5f, 0), g = touched(cap, 1e-3f, 1), m = touched(cap, 0.0f, 2), v = touched(cap, 0.0f, 3);
  auto ps = touched(cap, 0.5f, 4), buf = touched(cap, 0.0f, 5);
  auto a = touched(cap, 0.0f, 6), b = touched(cap, 1.0f, 7), c = touched(cap, 2.0f, 8);
  // bf16 streams: an element is half as wide, so twice the elements make the same skew.
  const std::size_t skew16 = 2 * stream_skew;
  strata::buffer<strata::bf16, strata::host> g16_buf(cap + skew16 * max_streams), p16_buf(cap + skew16 * max_streams);
  strata::bf16* g16 = g16_buf.data() + skew16 * 9;
  strata::bf16* p16 = p16_buf.data() + skew16 * 10;
  for (std::size_t i = 0; i < cap; ++i) g16[i] = strata::bf16(1e-3f);
  strata::buffer<strata::fp16, strata::host> gh_buf(cap + skew16 * max_streams), ph_buf(cap + skew16 * max_streams);
  strata::fp16* gh = gh_buf.data() + skew16 * 11;
  strata::fp16* ph = ph_buf.data() + skew16 * 12;
  for (std::size_t i = 0; i < cap; ++i) gh[i] = strata::fp16(1e-3f);

  long adam_step = 0, adam16_step = 0, adamh_step = 0, sgd_step = 0, lion_step = 0, naive_step = 0;
  const strata::adamw adam{};
  const strata::sgd sgd{.momentum = 0.9f, .weight_decay = 1e-4f};
  const strata::lion lion{.weight_decay = 0.01f};
  const std::vector<row> rows = {
      {"triad", 12,
       [&](std::size_t n) {
         float *pa = a.data(), *pb = b.data(), *pc = c.data();
#pragma omp parallel for simd schedule(static)
         for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
       }},
      {"adamw fp32", 28,
       [&](std::size_t n) {
         adam.step(strata::shard_args<float, float>{p.data(), g.data(), m.data(), v.data(), nullptr, n}, 1e-4f, 1.0f,
                   true, ++adam_step);
       }},
      {"adamw naive std::sqrt", 28,
       [&](std::size_t n) { naive_adamw(n, p.data(), g.data(), m.data(), v.data(), 1e-4f, ++naive_step); }},
      {"adamw bf16 mixed", 28,  // master, m, v r/w (24) + bf16 grad read (2) + bf16 param write (2)
       [&](std::size_t n) {
         adam.step(strata::shard_args<strata::bf16, strata::bf16>{p.data(), g16, m.data(), v.data(), p16, n}, 1e-4f,
                   1.0f, true, ++adam16_step);
       }},
      {"adamw fp16 mixed", 28,  // as bf16: the 16-bit conversions are the only difference
       [&](std::size_t n) {
         adam.step(strata::shard_args<strata::fp16, strata::fp16>{p.data(), gh, m.data(), v.data(), ph, n}, 1e-4f, 1.0f,
                   true, ++adamh_step);
       }},
      {"sgd momentum fp32", 20,
       [&](std::size_t n) {
         sgd.step(strata::shard_args<float, float>{ps.data(), g.data(), buf.data(), nullptr, nullptr, n}, 1e-4f, 1.0f,
                  true, ++sgd_step);
       }},
      {"lion fp32", 20,
       [&](std::size_t n) {
         lion.step(strata::shard_args<float, float>{ps.data(), g.data(), buf.data(), nullptr, nullptr, n}, 1e-4f, 1.0f,
                   true, ++lion_step);
       }},
  };

  // "time / fp32" is an AdamW row's median over fp32 AdamW's of the same size and threads:
  // mixed precision moves as many bytes, so it says what the 16-bit conversions cost.
  std::printf("\n| params | threads | kernel | median ms | Gparam/s | GB/s | vs triad | time / fp32 |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  bool target_met = true, target_checked = false;
  // The worst time over fp32 AdamW's of each mixed row at >= 2^24 params (0: not run).
  double worst_bf16 = 0, worst_fp16 = 0;
  for (int k = o.min_log2; k <= o.max_log2; ++k) {
    const std::size_t n = std::size_t{1} << k;
    for (int t : o.threads) {
      omp_set_num_threads(t);
      // Every row once a rep, in turn, after a warm-up round (caches, page tables, the
      // OpenMP team): a slow stretch of this shared machine falls on the rows of one rep
      // alike, and a row's ratio to the triad or to fp32 AdamW is the median of its ratios
      // within each rep, not a ratio of medians taken minutes apart.
      std::vector<std::vector<double>> times(rows.size());
      for (int rep = -1; rep < o.reps; ++rep)
        for (std::size_t j = 0; j < rows.size(); ++j) {
          const double sec = seconds([&] { rows[j].run(n); });
          if (rep >= 0) times[j].push_back(sec);
        }
      const auto time_over = [&](std::size_t j, std::size_t base) {
        std::vector<double> r;
        for (int rep = 0; rep < o.reps; ++rep) r.push_back(times[j][rep] / times[base][rep]);
        return median(r);
      };
      const std::size_t triad = 0, adamw_fp32 = 1;  // the rows' order above
      for (std::size_t j = 0; j < rows.size(); ++j) {
        const row& r = rows[j];
        const std::string_view name = r.name;
        const double s = median(times[j]);
        const double gbs = r.bytes_per_param * double(n) / s / 1e9;
        const double ratio = r.bytes_per_param / rows[triad].bytes_per_param / time_over(j, triad);
        const double vs_fp32 = time_over(j, adamw_fp32);
        char vs_fp32_text[32] = "-";
        if (name.starts_with("adamw")) std::snprintf(vs_fp32_text, sizeof vs_fp32_text, "%.2f", vs_fp32);
        std::printf("| 2^%d | %d | %s | %.3f | %.3f | %.1f | %.2f | %s |\n", k, t, r.name, s * 1e3, double(n) / s / 1e9,
                    gbs, ratio, vs_fp32_text);
        if (name == "adamw fp32" && k >= 24) {
          target_checked = true;
          target_met = target_met && ratio >= 0.8;
        }
        if (name == "adamw bf16 mixed" && k >= 24) worst_bf16 = std::max(worst_bf16, vs_fp32);
        if (name == "adamw fp16 mixed" && k >= 24) worst_fp16 = std::max(worst_fp16, vs_fp32);
      }
      std::fflush(stdout);
    }
  }
  if (target_checked)
    std::printf("\ntarget (fp32 AdamW >= 80%% of triad GB/s at >= 2^24 params): %s\n", target_met ? "met" : "NOT met");
  for (const auto& [kind, worst] : {std::pair{"bf16", worst_bf16}, std::pair{"fp16", worst_fp16}})
    if (worst > 0)
      std::printf("target (mixed %s AdamW within 1.5x of fp32 AdamW's time at >= 2^24 params): %s, worst %.2fx\n", kind,
                  worst <= 1.5 ? "met" : "NOT met", worst);
  return 0;
}
