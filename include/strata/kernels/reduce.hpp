// Deterministic host reductions and casts over flat buffers: sum of squares (for the
// global grad norm), finite check, scaling, and fp32 <-> bf16/fp16 casts.
#pragma once
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "host_driver.hpp"

namespace strata::kernels {

namespace detail {

// The partial-sum layout is fixed by these constants alone: blocks of reduce_block
// elements, each summed in reduce_lanes interleaved double accumulators combined by
// a fixed tree, then the block sums added in index order. Neither the thread count
// nor the vector width of the build can change the result.
inline constexpr std::size_t reduce_block = 8192;
inline constexpr std::size_t reduce_lanes = 8;
// Block sums are produced this many at a time into a stack array, so no workspace
// is allocated; the running total still adds them strictly in index order.
inline constexpr std::size_t reduce_round = 512;

template <class T>
STRATA_HOST_DEVICE STRATA_FORCEINLINE double widen(T x) {
  return static_cast<double>(static_cast<float>(x));
}

template <class T>
double block_sum_squares(const T* x, std::size_t n) {
  double acc[reduce_lanes] = {};
  std::size_t k = 0;
  for (; k + reduce_lanes <= n; k += reduce_lanes)
    for (std::size_t l = 0; l < reduce_lanes; ++l) {
      const double v = widen(x[k + l]);
      acc[l] += v * v;  // exact: a float squared fits in a double's mantissa
    }
  for (std::size_t l = 0; k < n; ++k, ++l) {
    const double v = widen(x[k]);
    acc[l] += v * v;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The exponent field of T's bit pattern; all ones means inf or NaN.
template <class T>
STRATA_HOST_DEVICE STRATA_FORCEINLINE bool nonfinite(T x) {
  if constexpr (std::is_same_v<T, float>)
    return (__builtin_bit_cast(std::uint32_t, x) & 0x7f800000u) == 0x7f800000u;
  else if constexpr (std::is_same_v<T, bf16>)
    return (x.bits & 0x7f80u) == 0x7f80u;
  else
    return (x.bits & 0x7c00u) == 0x7c00u;
}

struct scale_op {
  float* x;
  float s;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { x[i] *= s; }
};

template <class From, class To>
struct cast_op {
  const From* in;
  To* out;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { out[i] = round_to<To>(static_cast<float>(in[i])); }
};

template <class T>
inline constexpr bool reduced_float = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;
template <class T>
inline constexpr bool host_float = std::is_same_v<T, float> || reduced_float<T>;

}  // namespace detail

// Sum of x[i]^2 in double, bitwise the same for any OMP_NUM_THREADS (fixed layout above).
template <class T>
requires detail::host_float<T>
double sum_squares(std::span<const T> x) {
  const std::size_t n = x.size();
  const std::size_t blocks = (n + detail::reduce_block - 1) / detail::reduce_block;
  double total = 0.0;
  for (std::size_t r0 = 0; r0 < blocks; r0 += detail::reduce_round) {
    const std::size_t count = std::min(detail::reduce_round, blocks - r0);
    double partial[detail::reduce_round];
    const bool parallel = count > 1 && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
    for (std::size_t b = 0; b < count; ++b) {
      const std::size_t lo = (r0 + b) * detail::reduce_block;
      partial[b] = detail::block_sum_squares(x.data() + lo, std::min(detail::reduce_block, n - lo));
    }
    for (std::size_t b = 0; b < count; ++b) total += partial[b];
  }
  return total;
}
template <class T>
requires detail::host_float<T>
double sum_squares(std::span<T> x) {
  return sum_squares(std::span<const T>(x));
}

// True when no element is inf or NaN.
template <class T>
requires detail::host_float<T>
bool all_finite(std::span<const T> x) {
  const T* p = x.data();
  const std::size_t n = x.size();
  unsigned bad = 0;
#pragma omp parallel for simd schedule(static) \
    reduction(| : bad) if (n >= detail::host_parallel_min && !omp_in_parallel())
  for (std::size_t i = 0; i < n; ++i) bad |= detail::nonfinite(p[i]) ? 1u : 0u;
  return bad == 0;
}
template <class T>
requires detail::host_float<T>
bool all_finite(std::span<T> x) {
  return all_finite(std::span<const T>(x));
}

// x *= s, elementwise.
inline void scale(std::span<float> x, float s) { run_host(x.size(), detail::scale_op{x.data(), s}); }

// fp32 -> bf16/fp16 with round-to-nearest-even.
template <class P>
requires detail::reduced_float<P>
void cast(std::span<const float> in, std::span<P> out) {
  expects(in.size() == out.size(), strata::cat("kernels::cast: ", in.size(), " floats into ", out.size(), " elements"));
  run_host(in.size(), detail::cast_op<float, P>{in.data(), out.data()});
}

// bf16/fp16 -> fp32 (exact).
template <class P>
requires detail::reduced_float<P>
void cast(std::span<const P> in, std::span<float> out) {
  expects(in.size() == out.size(), strata::cat("kernels::cast: ", in.size(), " elements into ", out.size(), " floats"));
  run_host(in.size(), detail::cast_op<P, float>{in.data(), out.data()});
}
template <class P>
requires detail::reduced_float<P>
void cast(std::span<P> in, std::span<float> out) {
  cast(std::span<const P>(in), out);
}

}  // namespace strata::kernels
