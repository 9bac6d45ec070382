// How an update functor writes the 16-bit copy of an updated fp32 master weight:
// not at all, rounded to nearest even, or stochastically with a counter-based hash.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "scalar_math.hpp"

namespace strata {

// The rounding of updated params into a 16-bit compute copy (mixed precision).
enum class rounding : std::uint8_t { nearest_even, stochastic };

namespace kernels {

// A compile-time choice per functor instantiation, so the vectorized loop has no
// per-element branch: none (fp32 mode, master is the param), nearest_even, stochastic.
enum class write_mode : std::uint8_t { none, nearest_even, stochastic };

namespace detail {

// float -> IEEE binary16 bits, rounding up in magnitude with probability equal to the
// distance from the lower neighbour (in units of the gap), using 24 bits of `noise`.
// The two neighbours come from the round-to-nearest-even result and its magnitude
// neighbour, so subnormals and the step to infinity need no special case.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_fp16_stochastic(float f, std::uint32_t noise) {
  const std::uint16_t r = strata::detail::float_to_fp16_rne(f);
  if ((r & 0x7c00u) == 0x7c00u) return r;  // inf / NaN (and overflow) stay as RNE gives them
  const float rf = strata::detail::fp16_to_float(r);
  if (rf == f) return r;
  const float af = f < 0.0f ? -f : f;
  const float ar = rf < 0.0f ? -rf : rf;
  // The other neighbour in magnitude: r's magnitude bits +/- 1 (same sign bit).
  const std::uint16_t o = static_cast<std::uint16_t>(ar > af ? r - 1u : r + 1u);
  const float of = strata::detail::fp16_to_float(o);
  const float ao = of < 0.0f ? -of : of;
  const bool r_is_low = ar < ao;
  const float lo = r_is_low ? ar : ao;
  const float hi = r_is_low ? ao : ar;
  // af - lo and hi - lo are exact (neighbouring fp16 values are floats within a binade).
  const float p_up = (af - lo) / (hi - lo);
  // u in [0, 1) from the complemented noise, so that, as core's bf16 rounding (which adds
  // the noise below the kept bits), noise 0 truncates and all-ones rounds away from zero.
  const float u = static_cast<float>((~noise) >> 8) * 5.9604644775390625e-8f;
  const bool up = u < p_up;
  return up ? (r_is_low ? o : r) : (r_is_low ? r : o);
}

// Writes x into out[i] as P according to W. `key` and `global_index` feed stochastic
// rounding only (see scalar_math.hpp); float P is a plain copy.
template <write_mode W, class P>
STRATA_HOST_DEVICE STRATA_FORCEINLINE void write_param(P* out, std::size_t i, float x, std::uint64_t key,
                                                       std::size_t global_index) {
  if constexpr (W == write_mode::none) {
    (void)out, (void)i, (void)x, (void)key, (void)global_index;
  } else if constexpr (W == write_mode::nearest_even || std::is_same_v<P, float>) {
    (void)key, (void)global_index;
    out[i] = round_to<P>(x);
  } else if constexpr (std::is_same_v<P, bf16>) {
    out[i] = bf16::from_bits(strata::detail::float_to_bf16_stochastic(x, rounding_noise(key, global_index)));
  } else {
    static_assert(std::is_same_v<P, fp16>, "strata: params are float, bf16 or fp16");
    out[i] = fp16::from_bits(float_to_fp16_stochastic(x, rounding_noise(key, global_index)));
  }
}

}  // namespace detail
}  // namespace kernels
}  // namespace strata
