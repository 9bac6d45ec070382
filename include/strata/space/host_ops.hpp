// ops<host>: the host space's operations (space/ops.hpp) on OpenBLAS and OpenMP. Loops go
// parallel only when they pay, and every sum has an order that no thread count changes.
#pragma once
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "host.hpp"
#include "host_isa.hpp"
#include "host_threads.hpp"
#include "ops.hpp"
#include "tensor.hpp"

namespace strata {

namespace detail {

// Below this many elements an OpenMP team costs more than it saves (a fork/join is a
// few microseconds; a cheap elementwise op is under a nanosecond per element).
inline constexpr std::int64_t parallel_threshold = 1 << 15;

// The calling thread's scratch for partial sums, grown to n and kept (one buffer for
// every reduction that needs one: none is running when another starts on that thread).
inline double* host_scratch_doubles(std::size_t n) {
  thread_local std::vector<double> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch.data();
}

// The loops, stamped out once per instruction set (space/host_isa.hpp): a target
// attribute carries over to the OpenMP region GCC outlines from the function, and the
// functors inlined there compile for that target, calling strata::math's vector forms of
// its width. No fused multiply-adds in any of them (AVX-512 has them, the others not), so
// a functor gives the same bits at every width and in a loop's scalar remainder. Row
// functors are marked STRATA_FORCEINLINE for this: GCC would not inline the larger ones
// by itself, and one not inlined compiles for the baseline.
// clang-format off
#define STRATA_HOST_LOOPS(isa, ...)                                                              \
  template <class F>                                                                             \
  __attribute__((__VA_ARGS__)) void elementwise_##isa(std::int64_t n, F& f) {                    \
    _Pragma("omp parallel for simd if (parallel : n >= parallel_threshold)")                     \
    for (std::int64_t i = 0; i < n; ++i) f(i);                                                   \
  }                                                                                              \
  template <class F>                                                                             \
  __attribute__((__VA_ARGS__)) void for_rows_##isa(std::int64_t rows, std::int64_t cost, F& f) { \
    _Pragma("omp parallel for schedule(static) if (rows * cost >= parallel_threshold && rows > 1)") \
    for (std::int64_t r = 0; r < rows; ++r) f(r);                                                \
  }
STRATA_HOST_LOOPS(sse2, optimize("fp-contract=off"))
STRATA_HOST_LOOPS(avx2, target("avx2"), optimize("fp-contract=off"))
STRATA_HOST_LOOPS(avx512, target("avx512f"), optimize("fp-contract=off"))
// clang-format on
#undef STRATA_HOST_LOOPS

// f(i) for i in [0, n): vectorized always, threaded when n is large.
template <class F>
void elementwise(std::int64_t n, F&& f) {
  switch (host_simd()) {
    case host_isa::avx512: return elementwise_avx512(n, f);
    case host_isa::avx2: return elementwise_avx2(n, f);
    case host_isa::sse2: break;
  }
  elementwise_sse2(n, f);
}

// f(row) for each row, threaded when rows * row_cost is large.
template <class F>
void for_rows(std::int64_t rows, std::int64_t row_cost, F&& f) {
  switch (host_simd()) {
    case host_isa::avx512: return for_rows_avx512(rows, row_cost, f);
    case host_isa::avx2: return for_rows_avx2(rows, row_cost, f);
    case host_isa::sse2: break;
  }
  for_rows_sse2(rows, row_cost, f);
}

// The row of a rows functor on the host: one thread does the whole row, vectorized. Its
// members are STRATA_HOST_DEVICE only so that a functor's call operator, which is, may
// call them in CUDA translation units too; they run on the host.
struct host_row {
  template <class G>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void for_each(std::int64_t n, G&& g) const {
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) g(j);
  }
  // The vector lanes' partial sums, combined at the end: a fixed order for a build.
  template <class G>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE double sum(std::int64_t n, G&& g) const {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t j = 0; j < n; ++j) s += g(j);
    return s;
  }
  template <class G>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE float max(std::int64_t n, G&& g) const {
    float m = g(0);
#pragma omp simd reduction(max : m)
    for (std::int64_t j = 0; j < n; ++j) {
      const float v = g(j);
      m = v > m ? v : m;
    }
    return m;
  }
  template <class G>
  STRATA_HOST_DEVICE void once(G&& g) const {
    g();
  }
  STRATA_HOST_DEVICE void sync() const {}
};

}  // namespace detail

template <>
struct ops<host> {
  using exec_type = executor<host>;
  // A batched GEMM is a loop of GEMMs here: layers walk (batch, head) pairs one at a
  // time instead, which keeps a pair's intermediates in cache.
  static constexpr bool prefers_batched = false;

  // A, B and C are float, or 16-bit (a host context with 16-bit activations, as the
  // tests run the layers of a mixed GPU trainer): 16-bit operands are widened (exactly)
  // into float copies, multiplied by BLAS, and a 16-bit C rounds once at the end: a
  // tensor-core GEMM's numbers, up to the order of its sums.
  template <class A, class B, class C>
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const A* a, std::int64_t lda, const B* b, std::int64_t ldb, float beta, C* c,
                   std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    if constexpr (std::is_same_v<A, float> && std::is_same_v<B, float> && std::is_same_v<C, float>) {
      (void)exec;
      (void)host_threads();  // BLAS on OpenMP's pool, before its first GEMM
      // LP64 CBLAS takes int extents: refuse what would silently wrap.
      const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
      expects<config_error>(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc), [&] {
        return strata::cat("gemm: extents m=", m, " n=", n, " k=", k, " exceed the 32-bit range of CBLAS");
      });
      // BLAS rejects leading dimensions below 1 even when k == 0 and nothing is read.
      const auto ld = [](std::int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
      cblas_sgemm(CblasRowMajor, ta == transpose::yes ? CblasTrans : CblasNoTrans,
                  tb == transpose::yes ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), alpha, a, ld(lda), b, ld(ldb), beta, c, ld(ldc));
    } else {
      // Each operand as a packed float matrix (rows x cols, leading dimension cols).
      const auto widened = [](const auto* in, std::int64_t rows, std::int64_t cols, std::int64_t ld) {
        std::vector<float> w(static_cast<std::size_t>(rows * cols));
        for (std::int64_t r = 0; r < rows; ++r)
          for (std::int64_t j = 0; j < cols; ++j) w[static_cast<std::size_t>(r * cols + j)] = in[r * ld + j];
        return w;
      };
      const std::int64_t a_rows = ta == transpose::yes ? k : m, a_cols = ta == transpose::yes ? m : k;
      const std::int64_t b_rows = tb == transpose::yes ? n : k, b_cols = tb == transpose::yes ? k : n;
      const std::vector<float> wa = widened(a, a_rows, a_cols, lda), wb = widened(b, b_rows, b_cols, ldb);
      std::vector<float> wc =
          beta != 0.0f ? widened(c, m, n, ldc) : std::vector<float>(static_cast<std::size_t>(m * n));
      gemm(exec, ta, tb, m, n, k, alpha, wa.data(), a_cols, wb.data(), b_cols, beta, wc.data(), n);
      for (std::int64_t r = 0; r < m; ++r)
        for (std::int64_t j = 0; j < n; ++j) c[r * ldc + j] = round_to<C>(wc[static_cast<std::size_t>(r * n + j)]);
    }
  }

  // No fused GEMMs here: the layers run the steps one by one (ops.hpp).
  template <class A, class B, class C, class W>
  static bool gemm_fused(const exec_type&, transpose, transpose, std::int64_t, std::int64_t, std::int64_t, const A*,
                         std::int64_t, const B*, std::int64_t, C*, std::int64_t, const gemm_epilogue<W, C>&) {
    return false;
  }

  // One GEMM after another: BLAS threads each one, and a matrix's bits are those of the
  // same GEMM alone.
  template <class A, class B, class C>
  static void gemm_strided_batched(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                   std::int64_t k, float alpha, const A* a, std::int64_t lda, std::int64_t stride_a,
                                   const B* b, std::int64_t ldb, std::int64_t stride_b, float beta, C* c,
                                   std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
    for (std::int64_t q = 0; q < batch; ++q)
      gemm(exec, ta, tb, m, n, k, alpha, a + q * stride_a, lda, b + q * stride_b, ldb, beta, c + q * stride_c, ldc);
  }

  template <class F>
  static void map(const exec_type&, std::int64_t n, const F& f) {
    const F g = f;  // a local copy: its pointers are loop invariants the vectorizer can see
    detail::elementwise(n, [g](std::int64_t i) __attribute__((always_inline)) { g(i); });
  }

  template <class F>
  static void rows(const exec_type&, std::int64_t rows, std::int64_t cols, const F& f) {
    const detail::host_row row;
    detail::for_rows(rows, cols, [&](std::int64_t r) __attribute__((always_inline)) { f(row, r); });
  }

  // Threads split (chunk, 64-column block) tiles, then the columns to add the chunks up
  // (ops.hpp: the order every space uses).
  template <class Term>
  static void add_column_sums(const exec_type&, std::int64_t rows, std::int64_t cols, const Term& term, float* out) {
    constexpr std::int64_t block = 64;
    if (rows <= 0 || cols <= 0) return;
    const std::int64_t blocks = (cols + block - 1) / block, chunks = detail::column_chunks(rows);
    [[maybe_unused]] const bool threaded = rows * cols >= detail::parallel_threshold;  // read by the pragmas
    // A chunk's sum of one column block, in row order.
    const auto chunk_sum = [&](std::int64_t c, std::int64_t bj, double* acc) __attribute__((always_inline)) {
      const std::int64_t j0 = bj * block, j1 = std::min(cols, j0 + block);
      const std::int64_t i1 = std::min(rows, (c + 1) * detail::column_chunk_rows);
      for (std::int64_t j = 0; j < block; ++j) acc[j] = 0.0;
      for (std::int64_t i = c * detail::column_chunk_rows; i < i1; ++i) {
#pragma omp simd
        for (std::int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<double>(term(i, j));
      }
    };
    if (chunks == 1) {  // the one chunk's sum is the total: no partials to keep
#pragma omp parallel for schedule(static) if (threaded && blocks > 1)
      for (std::int64_t bj = 0; bj < blocks; ++bj) {
        double acc[block];
        chunk_sum(0, bj, acc);
        for (std::int64_t j = bj * block; j < std::min(cols, (bj + 1) * block); ++j)
          out[j] = static_cast<float>(out[j] + acc[j - bj * block]);
      }
      return;
    }
    double* partial = detail::host_scratch_doubles(static_cast<std::size_t>(chunks * cols));
#pragma omp parallel for schedule(static) if (threaded)
    for (std::int64_t t = 0; t < chunks * blocks; ++t) {
      const std::int64_t c = t / blocks, bj = t % blocks, j0 = bj * block, j1 = std::min(cols, j0 + block);
      double acc[block];
      chunk_sum(c, bj, acc);
      for (std::int64_t j = j0; j < j1; ++j) partial[c * cols + j] = acc[j - j0];
    }
#pragma omp parallel for schedule(static) if (threaded && blocks > 1)
    for (std::int64_t bj = 0; bj < blocks; ++bj) {
      const std::int64_t j0 = bj * block, j1 = std::min(cols, j0 + block);
      double acc[block] = {};
      for (std::int64_t c = 0; c < chunks; ++c) {
#pragma omp simd
        for (std::int64_t j = j0; j < j1; ++j) acc[j - j0] += partial[c * cols + j];
      }
      for (std::int64_t j = j0; j < j1; ++j) out[j] = static_cast<float>(out[j] + acc[j - j0]);
    }
  }

  // One thread, in index order: the same sum for any thread count.
  template <class Term>
  static void mean(const exec_type&, std::int64_t n, const Term& term, double count, float* out) {
    double s = 0.0;
    for (std::int64_t i = 0; i < n; ++i) s += term(i);
    *out = count != 0.0 ? static_cast<float>(s / count) : 0.0f;
  }

  // A serial pass (the host reads the values where they are): throwing from inside an
  // OpenMP region would terminate the program, so checks come before threaded work.
  template <class Scratch>
  static id_check check_ids(const exec_type&, std::int64_t n, std::int64_t limit, const float* values, Scratch&,
                            bool labels = false) {
    const auto top = static_cast<float>(limit);
    for (std::int64_t i = 0; i < n; ++i) {
      const float v = values[i];
      if (!(v >= 0.0f && v < top && v == std::floor(v)) && !(labels && v == ignore_label)) [[unlikely]]
        return {i, v};
    }
    return {};
  }

  // Repeated ids add into the same row, so threads split the columns, not the tokens:
  // every element is summed in token order whatever the thread count.
  template <class S>
  static void scatter_add_rows(const exec_type&, std::int64_t n, std::int64_t d, std::int64_t lo, std::int64_t local,
                               const float* ids, const S* src, float* out) {
    constexpr std::int64_t block = 64;
    const std::int64_t blocks = (d + block - 1) / block;
#pragma omp parallel for schedule(static) if (n * d >= detail::parallel_threshold && blocks > 1)
    for (std::int64_t bj = 0; bj < blocks; ++bj) {
      const std::int64_t j0 = bj * block, j1 = std::min(d, j0 + block);
      for (std::int64_t t = 0; t < n; ++t) {
        const std::int64_t row = static_cast<std::int64_t>(ids[t]) - lo;
        if (row < 0 || row >= local) continue;
        float* o = out + row * d;
        const S* s = src + t * d;
#pragma omp simd
        for (std::int64_t j = j0; j < j1; ++j) o[j] += static_cast<float>(s[j]);
      }
    }
  }

  template <class T>
  static void fill_zero(const exec_type&, T* p, std::int64_t n) {
    if (n > 0) std::memset(static_cast<void*>(p), 0, static_cast<std::size_t>(n) * sizeof(T));
  }
  template <class T>
  static void copy(const exec_type&, T* dst, const T* src, std::int64_t n) {
    if (n > 0) std::memcpy(static_cast<void*>(dst), src, static_cast<std::size_t>(n) * sizeof(T));
  }
  template <class R, class T>
  static void broadcast_rows(const exec_type&, std::int64_t rows, std::int64_t cols, const R* row, T* out) {
    detail::for_rows(rows, cols, [&](std::int64_t r) {
      if constexpr (std::is_same_v<R, T>)
        std::memcpy(static_cast<void*>(out + r * cols), row, static_cast<std::size_t>(cols) * sizeof(T));
      else
        for (std::int64_t j = 0; j < cols; ++j) out[r * cols + j] = round_to<T>(static_cast<float>(row[j]));
    });
  }
  // a += b, in float (a 16-bit a rounds its sum once).
  template <class T>
  static void add_into(const exec_type&, std::int64_t n, T* a, const T* b) {
    detail::elementwise(
        n, [=](std::int64_t i) { a[i] = round_to<T>(static_cast<float>(a[i]) + static_cast<float>(b[i])); });
  }
};

}  // namespace strata
