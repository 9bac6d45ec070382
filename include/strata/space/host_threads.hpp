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

#include <string>

namespace strata {

struct host_threads_info {
  int threads = 1;       // OpenMP threads of strata's loops
  int blas_threads = 1;  // threads of one GEMM
  std::string blas;      // the BLAS and how it threads, e.g. "OpenBLAS 0.3.21 ... (OpenMP build)"
};

namespace detail {

inline host_threads_info configure_host_threads() {
  host_threads_info h;
  h.threads = omp_get_max_threads();
#ifdef OPENBLAS_VERSION
  const int mode = openblas_get_parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
  if (mode == 2) openblas_set_num_threads(h.threads);
  if (mode == 1) openblas_set_num_threads(1);
  h.blas_threads = mode == 0 ? 1 : openblas_get_num_threads();
  const char* const how[] = {" (sequential build)", " (pthreads build: one thread per GEMM, beside OpenMP's pool)",
                             " (OpenMP build: OpenMP's pool)"};
  h.blas = std::string(openblas_get_config()) + how[mode >= 0 && mode <= 2 ? mode : 0];
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
