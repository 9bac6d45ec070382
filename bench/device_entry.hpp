// The --device option of the benchmarks with a host and a CUDA path (bench/optimizer,
// bench/collectives, bench/train): X.cpp holds main() and the host path; X_device.cu, linked in only
// when CMake's STRATA_ENABLE_CUDA is on (which compiles X.cpp with STRATA_BENCH_HAS_CUDA=1),
// defines the CUDA path below. Nothing here depends on the compiler: both halves see the
// same declarations.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#ifndef STRATA_BENCH_HAS_CUDA
#define STRATA_BENCH_HAS_CUDA 0
#endif

namespace strata_bench {

// The CUDA paths, each taking the command line without its --device option; argv[0] is
// the program's. Each returns main()'s exit status.
int run_optimizer_cuda(int argc, char** argv);
int run_collectives_cuda(int argc, char** argv);
int run_train_cuda(int argc, char** argv);

enum class device_kind { cpu, cuda };

inline constexpr const char* no_cuda_text =
    "this build has no CUDA (configure with -DSTRATA_ENABLE_CUDA=ON where nvcc is found)";

// Takes `--device cpu|cuda` (or `--device=...`; the last one wins, default cpu) out of
// argv, leaving the other arguments in order; a bad or missing value exits 2.
inline device_kind take_device(const char* prog, int& argc, char** argv) {
  device_kind kind = device_kind::cpu;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    std::string_view value;
    if (a == "--device") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: --device needs a value (cpu or cuda)\n", prog);
        std::exit(2);
      }
      value = argv[++i];
    } else if (a.starts_with("--device=")) {
      value = a.substr(std::strlen("--device="));
    } else {
      argv[out++] = argv[i];
      continue;
    }
    if (value == "cpu")
      kind = device_kind::cpu;
    else if (value == "cuda")
      kind = device_kind::cuda;
    else {
      std::fprintf(stderr, "%s: --device %.*s: the devices are cpu and cuda\n", prog, static_cast<int>(value.size()),
                   value.data());
      std::exit(2);
    }
  }
  argc = out;
  argv[argc] = nullptr;
  return kind;
}

// What --device cuda does in a build without CUDA.
[[noreturn]] inline void exit_no_cuda(const char* prog) {
  std::fprintf(stderr, "%s: --device cuda: %s\n", prog, no_cuda_text);
  std::exit(2);
}

// A benchmark's usage: for "help" on stdout with exit 0 (--help), else the reason and
// the usage on stderr with exit 2 (a bad option), as every program answers.
[[noreturn]] inline void exit_usage(const std::string& why, const char* text) {
  if (why == "help") {
    std::fputs(text, stdout);
    std::exit(0);
  }
  std::fprintf(stderr, "%s\n%s", why.c_str(), text);
  std::exit(2);
}

// One `--name N` option of a benchmark (N a non-negative integer), and the loop that
// reads them: --help, a missing or bad value, or an unknown name calls usage (which exits).
// An option bound to an int takes the value capped at a million (more is no benchmark).
struct int_option {
  std::string_view name;
  std::function<void(unsigned long long)> set;
  int_option(std::string_view n, std::function<void(unsigned long long)> s) : name(n), set(std::move(s)) {}
  int_option(std::string_view n, int& target)
      : name(n), set([&target](unsigned long long v) { target = static_cast<int>(std::min(v, 1'000'000ULL)); }) {}
};
inline void parse_int_options(int argc, char** argv, std::initializer_list<int_option> opts,
                              void (*usage)(const std::string&)) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") usage("help");
    if (i + 1 >= argc) usage(std::string(a) + " needs a value");
    char* end = nullptr;
    const char* text = argv[++i];
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (*end || *text == '-' || *text == '\0') usage(std::string(a) + " wants a non-negative integer");
    const auto o = std::find_if(opts.begin(), opts.end(), [&](const int_option& x) { return x.name == a; });
    if (o == opts.end()) usage("unknown option " + std::string(a));
    o->set(v);
  }
}

// The verdict of a --device cuda path on a machine without a usable GPU (the probe's
// reason printed after `what`): exit 0 where there is none to measure, 1 where the GPU is
// broken, or where STRATA_REQUIRE_GPU=1 (scripts/gpu-check) says there must be one.
// `say`: whether this process prints it (rank 0 of several).
inline int no_gpu_status(const char* what, bool absent, bool required, const std::string& reason, bool say = true) {
  const bool skip = absent && !required;
  if (say)
    std::printf("%s: %s (%s); nothing to measure%s\n", what, absent ? "no GPU" : "the GPU cannot be used",
                reason.c_str(),
                skip     ? ""
                : absent ? " (STRATA_REQUIRE_GPU=1: a failure)"
                         : "");
  return skip ? 0 : 1;
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace strata_bench
