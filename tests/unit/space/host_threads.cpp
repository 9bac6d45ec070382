// One thread pool: after the host space's first GEMM, OpenBLAS's OpenMP build threads a
// GEMM over OMP_NUM_THREADS (OpenMP's pool), and a pthreads build runs it on the calling
// thread, so no second pool competes with OpenMP's for the cores. Where the build linked
// the OpenMP build (STRATA_BLAS_OPENMP), it is also the one loaded.
#include <cblas.h>
#include <omp.h>

#include <strata/strata.hpp>
#include <vector>

#include "catch.hpp"

TEST_CASE("the host's GEMMs share OpenMP's threads, and the count is OMP_NUM_THREADS") {
  // OPENBLAS_NUM_THREADS, if set, does not win over the one setting.
  const int want = omp_get_max_threads();
  std::vector<float> a(64 * 64, 1.0f), b(64 * 64, 2.0f), c(64 * 64);
  strata::ops<strata::host>::gemm({}, strata::transpose::no, strata::transpose::no, 64, 64, 64, 1.0f, a.data(), 64,
                                  b.data(), 64, 0.0f, c.data(), 64);
  CHECK(c[0] == 128.0f);
  const auto& h = strata::host_threads();
  INFO("blas: " << h.blas);
  CHECK(h.threads == want);
  const int mode = openblas_get_parallel();
  CHECK(h.blas_threads == (mode == 2 ? want : 1));
  CHECK(openblas_get_num_threads() == h.blas_threads);
  CHECK(!h.blas.empty());
#if STRATA_BLAS_OPENMP
  CHECK(mode == 2);  // the run path found the OpenMP build, not the alternatives' pthreads one
#endif
}
