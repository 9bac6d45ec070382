// GEMM for the nn/ layers: a row-major wrapper over cblas_sgemm, chosen by the space
// tag so that a cuBLAS overload for the CUDA space can sit beside it later.
#pragma once
#include <cblas.h>

#include <climits>
#include <cstdint>

#include "../../core/error.hpp"
#include "../../space/host.hpp"

namespace strata::nn::detail {

enum class transpose : bool { no = false, yes = true };

// C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C, all row-major. With beta == 0,
// C is written without being read (BLAS semantics), so stale NaNs in C do not leak.
inline void gemm(host, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k, float alpha,
                 const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
                 std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  // LP64 CBLAS takes int extents: refuse what would silently wrap.
  const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
  // (The message is built only on failure: a step must not allocate.)
  if (!(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc))) [[unlikely]]
    strata::expects<config_error>(false, strata::detail::cat("gemm: extents m=", m, " n=", n, " k=", k,
                                                             " exceed the 32-bit range of CBLAS"));
  // BLAS rejects leading dimensions below 1 even when k == 0 and nothing is read.
  const auto ld = [](std::int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
  cblas_sgemm(CblasRowMajor, ta == transpose::yes ? CblasTrans : CblasNoTrans,
              tb == transpose::yes ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
}

}  // namespace strata::nn::detail
