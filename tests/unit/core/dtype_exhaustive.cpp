// Every input of the 16-bit conversions against the case-by-case form they replaced: all
// 2^32 float bit patterns to fp16 and to bf16 (round to nearest even; stochastic bf16 with
// a noise drawn per input, and fixed noise values on a sample), all 65536 fp16 and bf16
// patterns to float. Outputs are compared as bit patterns, NaNs included, and the
// conversions under test run in `omp simd` loops: the vectorized code the optimizers and
// the casts run, not only its scalar twin.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "catch.hpp"
#include "mix_bits.hpp"
#include "strata/core/dtype.hpp"

namespace {

// strata's conversions before they were made branch-free (core/dtype.hpp at f6b77b6),
// unchanged: the reference whose bits are the contract.
namespace reference {
using strata::detail::bits_float;
using strata::detail::float_bits;

constexpr std::uint16_t float_to_bf16_rne(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

constexpr std::uint16_t float_to_bf16_stochastic(float f, std::uint32_t noise) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return float_to_bf16_rne(f);  // inf and NaN: no noise
  u += noise & 0xffffu;
  return static_cast<std::uint16_t>(u >> 16);
}

constexpr float bf16_to_float(std::uint16_t b) { return bits_float(std::uint32_t{b} << 16); }

constexpr std::uint16_t float_to_fp16_rne(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                                    // below 2^-14: subnormal
    if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);          // <= 2^-25 rounds to 0
    const std::uint32_t e = x >> 23;
    const std::uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;
    std::uint32_t h = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  const std::uint32_t r = x + 0xfffu + ((x >> 13) & 1u) - 0x38000000u;
  return static_cast<std::uint16_t>(sign | (r >> 13));
}

constexpr float fp16_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e + 112u) << 23) | (m << 13));
}
}  // namespace reference

using strata::detail::bits_float;
using strata::detail::float_bits;

// Every input meets another noise, with upper bits set too, which the conversion must
// ignore.
constexpr std::uint32_t noise_of(std::uint32_t u) { return strata_test::mix_bits(u); }

// Mismatches of one conversion: how many, and the smallest input that gave one.
struct mismatches {
  std::uint64_t count = 0;
  std::uint32_t first = 0xffffffffu;
};

}  // namespace

TEST_CASE("float -> fp16 and bf16: every float gives the reference's bits") {
  constexpr std::uint32_t block = 1u << 16;  // the low half of the bit pattern
  // Fixed noise values, each applied to every 251st input: the two ends, the half-way
  // points of the discarded 16 bits, and upper bits only.
  constexpr std::uint32_t fixed_noise[] = {0u, 1u, 0x7fffu, 0x8000u, 0xffffu, 0xffff0000u, 0xffffffffu};
  std::uint64_t fp16_bad = 0, bf16_bad = 0, stochastic_bad = 0, fixed_bad = 0;
  std::uint32_t fp16_first = 0xffffffffu, bf16_first = 0xffffffffu, stochastic_first = 0xffffffffu,
                fixed_first = 0xffffffffu;
#pragma omp parallel reduction(+ : fp16_bad, bf16_bad, stochastic_bad, fixed_bad) \
    reduction(min : fp16_first, bf16_first, stochastic_first, fixed_first)
  {
    std::vector<std::uint16_t> h(block), b(block), s(block);
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t hi = 0; hi < 65536; ++hi) {
      const std::uint32_t base = static_cast<std::uint32_t>(hi) << 16;
      std::uint16_t* ph = h.data();
      std::uint16_t* pb = b.data();
      std::uint16_t* ps = s.data();
#pragma omp simd
      for (std::uint32_t lo = 0; lo < block; ++lo) {
        const std::uint32_t u = base | lo;
        const float f = bits_float(u);
        ph[lo] = strata::detail::float_to_fp16_rne(f);
        pb[lo] = strata::detail::float_to_bf16_rne(f);
        ps[lo] = strata::detail::float_to_bf16_stochastic(f, noise_of(u));
      }
      for (std::uint32_t lo = 0; lo < block; ++lo) {
        const std::uint32_t u = base | lo;
        const float f = bits_float(u);
        if (ph[lo] != reference::float_to_fp16_rne(f)) ++fp16_bad, fp16_first = std::min(fp16_first, u);
        if (pb[lo] != reference::float_to_bf16_rne(f)) ++bf16_bad, bf16_first = std::min(bf16_first, u);
        if (ps[lo] != reference::float_to_bf16_stochastic(f, noise_of(u)))
          ++stochastic_bad, stochastic_first = std::min(stochastic_first, u);
      }
      for (const std::uint32_t noise : fixed_noise)
        for (std::uint32_t lo = static_cast<std::uint32_t>(hi) % 251; lo < block; lo += 251) {
          const float f = bits_float(base | lo);
          if (strata::detail::float_to_bf16_stochastic(f, noise) != reference::float_to_bf16_stochastic(f, noise))
            ++fixed_bad, fixed_first = std::min(fixed_first, base | lo);
        }
    }
  }
  INFO(std::hex << std::showbase << "first mismatching float bits (0xffffffff when none): fp16 " << fp16_first
                << ", bf16 " << bf16_first << ", stochastic bf16 " << stochastic_first << ", with fixed noise "
                << fixed_first);
  CHECK(fp16_bad == 0);
  CHECK(bf16_bad == 0);
  CHECK(stochastic_bad == 0);
  CHECK(fixed_bad == 0);
}

TEST_CASE("fp16 and bf16 -> float: every pattern gives the reference's bits") {
  std::vector<float> from_fp16(65536), from_bf16(65536);
  float* ph = from_fp16.data();
  float* pb = from_bf16.data();
#pragma omp simd
  for (std::uint32_t i = 0; i < 65536; ++i) {
    ph[i] = strata::detail::fp16_to_float(static_cast<std::uint16_t>(i));
    pb[i] = strata::detail::bf16_to_float(static_cast<std::uint16_t>(i));
  }
  mismatches fp16_bad, bf16_bad;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    if (float_bits(ph[i]) != float_bits(reference::fp16_to_float(h)))
      ++fp16_bad.count, fp16_bad.first = std::min(fp16_bad.first, i);
    if (float_bits(pb[i]) != float_bits(reference::bf16_to_float(h)))
      ++bf16_bad.count, bf16_bad.first = std::min(bf16_bad.first, i);
  }
  INFO(std::hex << std::showbase << "first mismatching pattern (0xffffffff when none): fp16 " << fp16_bad.first
                << ", bf16 " << bf16_bad.first);
  CHECK(fp16_bad.count == 0);
  CHECK(bf16_bad.count == 0);
  // The round trip: every fp16 and bf16 value comes back to its own bits, except that a
  // NaN comes back quiet (0x7e00 for fp16, the quiet bit set for bf16), sign kept.
  std::uint32_t round_trip_bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const bool fp16_nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
    const bool bf16_nan = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
    const std::uint16_t fp16_back = fp16_nan ? static_cast<std::uint16_t>((h & 0x8000u) | 0x7e00u) : h;
    const std::uint16_t bf16_back = bf16_nan ? static_cast<std::uint16_t>(h | 0x40u) : h;
    round_trip_bad += strata::detail::float_to_fp16_rne(ph[i]) != fp16_back;
    round_trip_bad += strata::detail::float_to_bf16_rne(pb[i]) != bf16_back;
  }
  CHECK(round_trip_bad == 0);
}
