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

// The conversions below are branch-free: every case is computed and the answer picked
// with select_bits, so a loop of them vectorizes (under `omp simd`, at baseline x86-64
// flags) and a GPU warp never diverges on them. Their bits are the contract: those of
// the case-by-case form they replace, which tests/unit/core/dtype_exhaustive.cpp keeps
// and compares them with on every input.
// - Exponent compares use int32_t: the values are below 2^31, where signed and unsigned
//   order agree, and SSE2 has only the signed 32-bit compare.
// - A 16-bit result is assembled in the upper half of a 32-bit word and shifted down
//   last. Were it built in the low half, GCC would narrow the selects and masks to 16
//   bits, and SSE2 has no cheap 32 -> 16 bit pack: each mask would pay one.

// All ones when c holds, else 0; and c ? a : b made of masks. A ?: is a branch to GCC
// until if-conversion, and under the default -ftrapping-math it first sinks a float
// operation used by one arm only into that arm and then will not if-convert it (it might
// raise a flag), which leaves the whole loop scalar. Masks use both operands
// unconditionally, so nothing moves.
STRATA_HOST_DEVICE constexpr std::uint32_t mask_bits(bool c) { return 0u - static_cast<std::uint32_t>(c); }
STRATA_HOST_DEVICE constexpr std::uint32_t select_bits(bool c, std::uint32_t a, std::uint32_t b) {
  return (a & mask_bits(c)) | (b & ~mask_bits(c));
}

// float -> bf16 bits, round to nearest even; a NaN stays a NaN, made quiet, with its sign
// and the top of its payload.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_bf16_rne(float f) {
  const std::uint32_t u = float_bits(f);
  const bool nan = static_cast<std::int32_t>(u & 0x7fffffffu) > 0x7f800000;
  const std::uint32_t r = select_bits(nan, u | 0x400000u, u + 0x7fffu + ((u >> 16) & 1u));
  return static_cast<std::uint16_t>(r >> 16);
}

// float -> bf16 bits, stochastic rounding: `noise` supplies 16 uniform random bits, so
// the result rounds up with probability equal to the discarded fraction. Inf and NaN
// take no noise and come out as float_to_bf16_rne gives them.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_bf16_stochastic(float f, std::uint32_t noise) {
  const std::uint32_t u = float_bits(f);
  const bool special = (u & 0x7f800000u) == 0x7f800000u;
  const bool nan = static_cast<std::int32_t>(u & 0x7fffffffu) > 0x7f800000;
  const std::uint32_t r = select_bits(nan, u | 0x400000u, u + select_bits(special, 0u, noise & 0xffffu));
  return static_cast<std::uint16_t>(r >> 16);
}

STRATA_HOST_DEVICE constexpr float bf16_to_float(std::uint16_t b) { return bits_float(std::uint32_t{b} << 16); }

// float -> IEEE binary16 bits, round to nearest even, with subnormals, inf and NaN (every
// NaN becomes the quiet NaN 0x7e00 with f's sign). With x = |f|'s bits, the fp16 bits h
// are built as h << 16:
//   normal (x >= 2^-14): rebias the exponent by -112 and round the 13 dropped bits to
//     nearest even in integers; a carry out of the mantissa steps the exponent, which
//     also turns [65520, 65536) into inf;
//   subnormal (x < 2^-14): |f| + 0.5 rounds, in the float adder, to a multiple of 2^-24
//     (the fp16 subnormal step) and the sum's low bits are h (0x400, the smallest
//     normal, when it rounds up to 2^-14; 0 for |f| <= 2^-25). This is the only float
//     operation; it needs the default rounding mode, as all of strata's arithmetic, and
//     flushing float subnormals to zero (FTZ, DAZ) cannot change its result;
//   x >= 65536 (inf included) and NaN: the fixed answers.
STRATA_HOST_DEVICE constexpr std::uint16_t float_to_fp16_rne(float f) {
  const std::uint32_t u = float_bits(f);
  const std::uint32_t x = u & 0x7fffffffu;
  const std::int32_t xs = static_cast<std::int32_t>(x);
  // (x + 0xfff + odd - (112 << 23)) >> 13 << 16; the bits shifted out are above h.
  const std::uint32_t normal = (x + 0xc8000fffu + ((x >> 13) & 1u)) << 3;
  // 0.5f's bits (0x3f000000) vanish in the shift.
  const std::uint32_t subnormal = float_bits(bits_float(x) + 0.5f) << 16;
  const std::uint32_t special = 0x7c000000u | (mask_bits(xs > 0x7f800000) & 0x02000000u);
  std::uint32_t h = select_bits(xs < 0x38800000, subnormal, normal);
  h = select_bits(xs >= 0x47800000, special, h);
  return static_cast<std::uint16_t>(((u & 0x80000000u) | h) >> 16);
}

// IEEE binary16 bits -> float, exactly; a NaN keeps its payload (signalling or quiet) as
// the top of the float's. With u = h << 16 and e = the fp16 exponent:
//   normal: exponent and mantissa shifted into place, the exponent rebiased by +112;
//   e = 31 (inf, NaN): rebiased by +224, to the float's all-ones exponent;
//   e = 0 (zero, subnormal): the mantissa m times 2^-24, exact, computed as the integer
//     m << 16 times 2^-40.
STRATA_HOST_DEVICE constexpr float fp16_to_float(std::uint16_t h) {
  const std::uint32_t u = std::uint32_t{h} << 16;
  const std::uint32_t em = u & 0x7fff0000u;
  const std::int32_t ems = static_cast<std::int32_t>(em);
  const std::uint32_t biased = (em >> 3) + (112u << 23) + (mask_bits(ems >= 0x7c000000) & (112u << 23));
  const std::uint32_t subnormal = float_bits(static_cast<float>(ems) * 9.094947017729282379150390625e-13f);
  return bits_float((u & 0x80000000u) | select_bits(ems < 0x04000000, subnormal, biased));
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
// clang-format off
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
// clang-format on
template <class T>
inline constexpr dtype dtype_v = dtype_of<std::remove_cv_t<T>>::value;

constexpr std::size_t size_of(dtype t) {
  switch (t) {
    case dtype::f64:
    case dtype::i64:
    case dtype::u64: return 8;
    case dtype::f32:
    case dtype::i32:
    case dtype::u32: return 4;
    case dtype::bf16:
    case dtype::f16:
    case dtype::u16:
    case dtype::i16: return 2;
    case dtype::u8:
    case dtype::i8: return 1;
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
  for (auto t : {dtype::f32, dtype::f64, dtype::bf16, dtype::f16, dtype::i32, dtype::i64, dtype::u8, dtype::u16,
                 dtype::u32, dtype::u64, dtype::i8, dtype::i16})
    if (name_of(t) == s) {
      out = t;
      return true;
    }
  return false;
}

}  // namespace strata
