// Scalar helpers that the update functors share on host and device: a square root
// with no errno path, sign, and the counter-based hash behind stochastic rounding.
#pragma once
#include <cstdint>

#include "../core/config.hpp"
#include "../core/hash.hpp"

namespace strata::kernels::detail {

// sqrt of a value the caller knows is >= 0 (or NaN). Under -fmath-errno GCC and clang
// wrap every sqrt call in a "negative argument -> call libm for errno" branch, and that
// branch stops the vectorizer; no attribute or pragma on a function lifts it (the
// builtin's errno-ness is fixed per translation unit). The host driver therefore never
// calls this inside its vectorized loops: functors that need a root expose pre_sqrt /
// post_sqrt, and the driver takes the roots of a tile with packed instructions
// (host_driver.hpp). This scalar form serves the CUDA driver and the operator().
STRATA_HOST_DEVICE inline float sqrt_nonneg(float x) { return __builtin_sqrtf(x); }

// -1, 0 or +1 (0 for NaN), as torch.sign for finite inputs; written without branches so
// that GCC if-converts it inside a vectorized loop.
STRATA_HOST_DEVICE constexpr float sign(float x) {
  return static_cast<float>(static_cast<int>(x > 0.0f) - static_cast<int>(x < 0.0f));
}

using strata::golden64;
using strata::mix64;

// The per-step key of stochastic rounding, computed once on the host per step.
STRATA_HOST_DEVICE constexpr std::uint64_t rounding_key(std::uint64_t seed, std::uint64_t step) {
  return mix64(mix64(seed) + step * golden64);
}

// 32 random bits for element `global_index`: a pure function of (seed, step, index),
// so the rounding of a parameter does not depend on the shard layout, the thread
// count or the driver (a splitmix64 stream position per element).
STRATA_HOST_DEVICE constexpr std::uint32_t rounding_noise(std::uint64_t key, std::uint64_t global_index) {
  return static_cast<std::uint32_t>(mix64(key + (global_index + 1) * golden64) >> 32);
}

}  // namespace strata::kernels::detail
