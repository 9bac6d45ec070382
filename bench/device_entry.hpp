// The --device option of the benchmarks with a host and a CUDA path (bench/optimizer,
// bench/collectives): X.cpp holds main() and the host path; X_device.cu, linked in only
// when CMake's STRATA_ENABLE_CUDA is on (which compiles X.cpp with STRATA_BENCH_HAS_CUDA=1),
// defines the CUDA path below. Nothing here depends on the compiler: both halves see the
// same declarations.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#ifndef STRATA_BENCH_HAS_CUDA
#define STRATA_BENCH_HAS_CUDA 0
#endif

namespace strata_bench {

// The CUDA paths, each taking the command line without its --device option; argv[0] is
// the program's. Each returns main()'s exit status.
int run_optimizer_cuda(int argc, char** argv);
int run_collectives_cuda(int argc, char** argv);

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
    if (value == "cpu") kind = device_kind::cpu;
    else if (value == "cuda") kind = device_kind::cuda;
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

}  // namespace strata_bench
