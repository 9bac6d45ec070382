// How many threads the host space computes on, and how its BLAS shares them: one pool.
// OMP_NUM_THREADS (or OpenMP's default, the cores) is the one setting. OpenBLAS's OpenMP
// build runs GEMMs on that same pool, with that many threads. Its pthreads build would
// start a second pool that fights OpenMP's for the cores (a gpt step took twice as
// long), so there GEMMs run on the calling thread. A GEMM's bits depend on how many
// threads split it, so runs agree bit for bit only at one thread count; the examples'
// reports say it next to weights_hash.
#pragma once
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "host_isa.hpp"

namespace strata {

struct host_threads_info {
  int threads = 1;       // OpenMP threads of strata's loops
  int blas_threads = 1;  // threads of one GEMM
  std::string blas;      // the BLAS and how it threads, e.g. "OpenBLAS 0.3.21 ... (OpenMP build)"
  std::string simd;      // the loops' instruction set (host_isa.hpp), e.g. "avx512"
};

// OpenBLAS's DYNAMIC_ARCH builds (Debian's) pick their kernels by CPU model when they
// load; a model they do not know (a virtual machine's "Intel Xeon Processor") gets the
// generic Prescott kernels: SSE3, GEMMs several times slower on a CPU with AVX-512
// (bench/train: 2.8x per gpt step at its M size). The core OPENBLAS_CORETYPE should name
// instead ("SkylakeX", "Haswell"), or "" where the kernels fit the CPU, the variable is
// set already, or the BLAS is another. The examples restart themselves with it set.
inline std::string blas_kernel_advice() {
#if defined(OPENBLAS_VERSION) && defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE")) return {};
  if (std::string_view(openblas_get_config()).find("DYNAMIC_ARCH") == std::string_view::npos) return {};
  const std::string_view core = openblas_get_corename();
  bool generic = false;
  for (std::string_view g : {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai", "Coppermine",
                             "Northwood", "Banias", "Unknown"})
    generic =
        generic || (core.size() == g.size() && std::equal(core.begin(), core.end(), g.begin(),
                                                          [](char a, char b) { return (a | 0x20) == (b | 0x20); }));
  if (!generic) return {};
  __builtin_cpu_init();  // libgcc also checks that the OS saves the wider registers
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return {};
}

namespace detail {

inline host_threads_info configure_host_threads() {
  host_threads_info h;
  h.threads = omp_get_max_threads();
  h.simd = name_of(host_simd());
#ifdef OPENBLAS_VERSION
  const int mode = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  if (mode == 2) openblas_set_num_threads(h.threads);
  if (mode == 1) openblas_set_num_threads(1);
  h.blas_threads = mode == 0 ? 1 : openblas_get_num_threads();
  const char* const how[] = {" (sequential build)", " (pthreads build: one thread per GEMM, beside OpenMP's pool)",
                             " (OpenMP build: OpenMP's pool)"};
  h.blas = std::string(openblas_get_config()) + how[mode >= 0 && mode <= 2 ? mode : 0];
  if (const std::string better = blas_kernel_advice(); !better.empty()) {
    h.blas += std::string(", generic kernels on this CPU: OPENBLAS_CORETYPE=") + better + " is faster";
    std::fprintf(stderr,
                 "strata: warning: OpenBLAS runs its generic %s kernels on a CPU with %s; set OPENBLAS_CORETYPE=%s "
                 "for GEMMs several times faster\n",
                 openblas_get_corename(), better == "SkylakeX" ? "AVX-512" : "AVX2", better.c_str());
  }
#else
  h.blas = "a BLAS other than OpenBLAS (its threads are its own)";
#endif
  return h;
}

}  // namespace detail

// The host space's threads, set up once, before the first GEMM (ops<host>::gemm calls it).
inline const host_threads_info& host_threads() {
  static const host_threads_info h = detail::configure_host_threads();
  return h;
}

}  // namespace strata
