// 16-bit floating types (bf16, fp16) with round-to-nearest-even and stochastic
// conversions usable on host and device, and the runtime dtype tag used by files.
#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "config.hpp"

namespace strata {

namespace detail {
STRATA_HOST_DEVICE constexpr std::uint32_t float_bits(float f) { return __builtin_bit_cast(std::uint32_t, f); }
STRATA_HOST_DEVICE constexpr float bits_float(std::uint32_t u) { return __builtin_bit_cast(float, u); }

// float -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_bf16_rne(float f) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// float -> bf16 bits, stochastic rounding: `noise` supplies 16 uniform random bits, so
// the result rounds up with probability equal to the discarded fraction.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_bf16_stochastic(float f, std::uint32_t noise) {
  std::uint32_t u = float_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u) return float_to_bf16_rne(f);  // inf and NaN: no noise
  u += noise & 0xffffu;
  return static_cast<std::uint16_t>(u >> 16);
}

STRATA_HOST_DEVICE constexpr float bf16_to_float(std::uint16_t b) { return bits_float(std::uint32_t{b} << 16); }

// float -> IEEE binary16 bits, round to nearest even, with subnormals, inf and NaN.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_fp16_rne(float f) {
  std::uint32_t x = float_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  if (x >= 0x7f800000u) return static_cast<std::uint16_t>(sign | (x > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (x >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                                   // below 2^-14: subnormal
    if (x <= 0x33000000u) return static_cast<std::uint16_t>(sign);         // <= 2^-25 rounds to 0
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

STRATA_HOST_DEVICE constexpr float fp16_to_float(std::uint16_t h) {
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
}  // namespace detail

// bfloat16: the upper half of an IEEE float. Converts to float implicitly, from float
// explicitly (the rounding is a decision the caller should see).
struct bf16 {
  std::uint16_t bits = 0;
  bf16() = default;
  STRATA_HOST_DEVICE constexpr explicit bf16(float f) : bits(detail::float_to_bf16_rne(f)) {}
  STRATA_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
  STRATA_HOST_DEVICE constexpr operator float() const { return detail::bf16_to_float(bits); }
  friend constexpr bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }
};

// IEEE binary16.
struct fp16 {
  std::uint16_t bits = 0;
  fp16() = default;
  STRATA_HOST_DEVICE constexpr explicit fp16(float f) : bits(detail::float_to_fp16_rne(f)) {}
  STRATA_HOST_DEVICE static constexpr fp16 from_bits(std::uint16_t b) {
    fp16 r;
    r.bits = b;
    return r;
  }
  STRATA_HOST_DEVICE constexpr operator float() const { return detail::fp16_to_float(bits); }
  friend constexpr bool operator==(fp16 a, fp16 b) { return a.bits == b.bits; }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2);
static_assert(std::is_trivially_copyable_v<bf16> && std::is_trivially_copyable_v<fp16>);

// Converts a float to T with round-to-nearest-even (identity for float and double).
template <class T>
STRATA_HOST_DEVICE constexpr T round_to(float f) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, fp16>)
    return T(f);
  else
    return static_cast<T>(f);
}

// The runtime element type, as files (safetensors, checkpoints) name it.
enum class dtype : std::uint8_t { f32, f64, bf16, f16, i32, i64, u8, u16, u32, u64, i8, i16 };

template <class T>
struct dtype_of;
template <> struct dtype_of<float> { static constexpr dtype value = dtype::f32; };
template <> struct dtype_of<double> { static constexpr dtype value = dtype::f64; };
template <> struct dtype_of<bf16> { static constexpr dtype value = dtype::bf16; };
template <> struct dtype_of<fp16> { static constexpr dtype value = dtype::f16; };
template <> struct dtype_of<std::int32_t> { static constexpr dtype value = dtype::i32; };
template <> struct dtype_of<std::int64_t> { static constexpr dtype value = dtype::i64; };
template <> struct dtype_of<std::uint8_t> { static constexpr dtype value = dtype::u8; };
template <> struct dtype_of<std::uint16_t> { static constexpr dtype value = dtype::u16; };
template <> struct dtype_of<std::uint32_t> { static constexpr dtype value = dtype::u32; };
template <> struct dtype_of<std::uint64_t> { static constexpr dtype value = dtype::u64; };
template <> struct dtype_of<std::int8_t> { static constexpr dtype value = dtype::i8; };
template <> struct dtype_of<std::int16_t> { static constexpr dtype value = dtype::i16; };
template <class T>
inline constexpr dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

constexpr std::size_t size_of(dtype t) {
  switch (t) {
    case dtype::f64: case dtype::i64: case dtype::u64: return 8;
    case dtype::f32: case dtype::i32: case dtype::u32: return 4;
    case dtype::bf16: case dtype::f16: case dtype::u16: case dtype::i16: return 2;
    case dtype::u8: case dtype::i8: return 1;
  }
  return 0;
}

// Names as in the safetensors format.
constexpr std::string_view name_of(dtype t) {
  switch (t) {
    case dtype::f32: return "F32";
    case dtype::f64: return "F64";
    case dtype::bf16: return "BF16";
    case dtype::f16: return "F16";
    case dtype::i32: return "I32";
    case dtype::i64: return "I64";
    case dtype::u8: return "U8";
    case dtype::u16: return "U16";
    case dtype::u32: return "U32";
    case dtype::u64: return "U64";
    case dtype::i8: return "I8";
    case dtype::i16: return "I16";
  }
  return "?";
}

// Parses a safetensors dtype name; false when unknown.
constexpr bool parse_dtype(std::string_view s, dtype& out) {
  for (auto t : {dtype::f32, dtype::f64, dtype::bf16, dtype::f16, dtype::i32, dtype::i64, dtype::u8,
                 dtype::u16, dtype::u32, dtype::u64, dtype::i8, dtype::i16})
    if (name_of(t) == s) {
      out = t;
      return true;
    }
  return false;
}

}  // namespace strata
