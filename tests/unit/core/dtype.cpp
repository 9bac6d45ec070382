// The 16-bit float types at their edges (signed zeros, subnormals and the rounding
// boundary below them, the largest finite values and the step to infinity, NaNs with
// their payloads, ties both ways), stochastic bf16 rounding, round_to, and the dtype
// tags files use (sizes, safetensors names, parsing). Every float is named by its bits
// or a hexadecimal literal, so each line says exactly which input it is.
#include <cmath>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "catch.hpp"
#include "strata/core/dtype.hpp"

using strata::bf16;
using strata::dtype;
using strata::fp16;
using strata::detail::bits_float;
using strata::detail::float_bits;

namespace {

std::uint16_t to_fp16(float f) { return fp16(f).bits; }
std::uint16_t to_bf16(float f) { return bf16(f).bits; }
std::uint16_t to_fp16(std::uint32_t u) { return fp16(bits_float(u)).bits; }
std::uint16_t to_bf16(std::uint32_t u) { return bf16(bits_float(u)).bits; }
std::uint32_t from_fp16(std::uint16_t h) { return float_bits(float(fp16::from_bits(h))); }
std::uint32_t from_bf16(std::uint16_t b) { return float_bits(float(bf16::from_bits(b))); }
float up(float f) { return std::nextafter(f, INFINITY); }
float down(float f) { return std::nextafter(f, 0.0f); }

}  // namespace

TEST_CASE("fp16: zeros and subnormals") {
  CHECK(to_fp16(0.0f) == 0x0000);
  CHECK(to_fp16(-0.0f) == 0x8000);
  CHECK(to_fp16(0x1p-24f) == 0x0001);  // the smallest subnormal
  CHECK(to_fp16(-0x1p-24f) == 0x8001);
  CHECK(to_fp16(0x3ffp-24f) == 0x03ff);  // the largest subnormal
  CHECK(to_fp16(-0x3ffp-24f) == 0x83ff);
  // 2^-25, half the smallest subnormal, is a tie between 0 and 2^-24: even is 0.
  CHECK(to_fp16(0x1p-25f) == 0x0000);
  CHECK(to_fp16(-0x1p-25f) == 0x8000);
  CHECK(to_fp16(up(0x1p-25f)) == 0x0001);
  CHECK(to_fp16(-up(0x1p-25f)) == 0x8001);
  CHECK(to_fp16(down(0x1p-25f)) == 0x0000);
  // Ties between subnormals go to the even one, up or down.
  CHECK(to_fp16(0x3p-25f) == 0x0002);  // 1.5 * 2^-24: 1 or 2, even 2 (up)
  CHECK(to_fp16(0x5p-25f) == 0x0002);  // 2.5 * 2^-24: 2 or 3, even 2 (down)
  CHECK(to_fp16(up(0x5p-25f)) == 0x0003);
  // Floats far below the fp16 range, float subnormals among them, flush to a signed 0.
  CHECK(to_fp16(0x1p-149f) == 0x0000);
  CHECK(to_fp16(-0x1p-149f) == 0x8000);
  CHECK(to_fp16(0x1p-126f) == 0x0000);
  CHECK(to_fp16(0x1p-30f) == 0x0000);
}

TEST_CASE("fp16: the subnormal / normal boundary") {
  CHECK(to_fp16(0x1p-14f) == 0x0400);  // the smallest normal
  CHECK(to_fp16(-0x1p-14f) == 0x8400);
  // Just below 2^-14 is nearer to it than to the largest subnormal.
  CHECK(to_fp16(down(0x1p-14f)) == 0x0400);
  // 1023.5 * 2^-24: a tie between 0x3ff and 0x400, which is even.
  CHECK(to_fp16(0x7ffp-25f) == 0x0400);
  CHECK(to_fp16(down(0x7ffp-25f)) == 0x03ff);
  CHECK(to_fp16(0xffdp-26f) == 0x03ff);  // 1023.25 * 2^-24
}

TEST_CASE("fp16: normal values and ties to even") {
  CHECK(to_fp16(1.0f) == 0x3c00);
  CHECK(to_fp16(-2.0f) == 0xc000);
  CHECK(to_fp16(0.5f) == 0x3800);
  CHECK(to_fp16(0.333251953125f) == 0x3555);  // exactly representable
  // The fp16 step above 1 is 2^-10; 1 + 2^-11 is the tie between 0x3c00 and 0x3c01.
  CHECK(to_fp16(0x1.002p+0f) == 0x3c00);  // tie, down to even
  CHECK(to_fp16(up(0x1.002p+0f)) == 0x3c01);
  CHECK(to_fp16(0x1.006p+0f) == 0x3c02);  // 1 + 3 * 2^-11: tie, up to even
  CHECK(to_fp16(down(0x1.006p+0f)) == 0x3c01);
  CHECK(to_fp16(-0x1.006p+0f) == 0xbc02);
  // A tie at the top of a binade rounds up into the next exponent.
  CHECK(to_fp16(0x1.ffep+0f) == 0x4000);
  CHECK(to_fp16(down(0x1.ffep+0f)) == 0x3fff);
}

TEST_CASE("fp16: the largest finite value and the step to infinity") {
  CHECK(to_fp16(65504.0f) == 0x7bff);
  CHECK(to_fp16(-65504.0f) == 0xfbff);
  // 65520 is the tie between 65504 (odd mantissa) and 65536, which is inf: even wins.
  CHECK(to_fp16(down(65520.0f)) == 0x7bff);
  CHECK(to_fp16(65520.0f) == 0x7c00);
  CHECK(to_fp16(-65520.0f) == 0xfc00);
  CHECK(to_fp16(65536.0f) == 0x7c00);
  CHECK(to_fp16(1e10f) == 0x7c00);
  CHECK(to_fp16(0x1.fffffep+127f) == 0x7c00);  // FLT_MAX
  CHECK(to_fp16(-0x1.fffffep+127f) == 0xfc00);
  CHECK(to_fp16(INFINITY) == 0x7c00);
  CHECK(to_fp16(-INFINITY) == 0xfc00);
}

TEST_CASE("fp16: every NaN becomes the quiet NaN 0x7e00 with its sign") {
  CHECK(to_fp16(0x7fc00000u) == 0x7e00);  // quiet
  CHECK(to_fp16(0xffc00000u) == 0xfe00);
  CHECK(to_fp16(0x7f800001u) == 0x7e00);  // signalling, payload in the lowest bit only
  CHECK(to_fp16(0x7fbfffffu) == 0x7e00);  // signalling, every payload bit
  CHECK(to_fp16(0x7fffffffu) == 0x7e00);
  CHECK(to_fp16(0xff800001u) == 0xfe00);
  CHECK(to_fp16(0x7fc02000u) == 0x7e00);  // a payload that would survive truncation is dropped
}

TEST_CASE("fp16 -> float is exact, NaN payloads kept") {
  CHECK(from_fp16(0x0000) == 0x00000000u);
  CHECK(from_fp16(0x8000) == 0x80000000u);  // -0
  CHECK(from_fp16(0x0001) == float_bits(0x1p-24f));
  CHECK(from_fp16(0x8001) == float_bits(-0x1p-24f));
  CHECK(from_fp16(0x03ff) == float_bits(0x3ffp-24f));
  CHECK(from_fp16(0x0400) == float_bits(0x1p-14f));
  CHECK(from_fp16(0x3c00) == float_bits(1.0f));
  CHECK(from_fp16(0x3555) == float_bits(0.333251953125f));
  CHECK(from_fp16(0x7bff) == float_bits(65504.0f));
  CHECK(from_fp16(0xfbff) == float_bits(-65504.0f));
  CHECK(from_fp16(0x7c00) == 0x7f800000u);
  CHECK(from_fp16(0xfc00) == 0xff800000u);
  CHECK(from_fp16(0x7e00) == 0x7fc00000u);
  CHECK(from_fp16(0xfe00) == 0xffc00000u);
  CHECK(from_fp16(0x7c01) == 0x7f802000u);  // signalling stays signalling
  CHECK(from_fp16(0x7d00) == 0x7fa00000u);
  CHECK(from_fp16(0x7fff) == 0x7fffe000u);
}

TEST_CASE("bf16: rounding, ties, overflow, NaN") {
  CHECK(to_bf16(1.0f) == 0x3f80);
  CHECK(to_bf16(0.0f) == 0x0000);
  CHECK(to_bf16(-0.0f) == 0x8000);
  // The discarded 16 bits at exactly half: to even, down or up.
  CHECK(to_bf16(0x3f808000u) == 0x3f80);
  CHECK(to_bf16(0x3f818000u) == 0x3f82);
  CHECK(to_bf16(0x3f808001u) == 0x3f81);
  CHECK(to_bf16(0x3f807fffu) == 0x3f80);
  CHECK(to_bf16(0xbf818000u) == 0xbf82);
  // Float subnormals round like any other value.
  CHECK(to_bf16(0x00000001u) == 0x0000);
  CHECK(to_bf16(0x00008000u) == 0x0000);
  CHECK(to_bf16(0x00018000u) == 0x0002);
  CHECK(to_bf16(0x80008001u) == 0x8001);
  // FLT_MAX rounds up to inf; a little less stays finite.
  CHECK(to_bf16(0x7f7fffffu) == 0x7f80);
  CHECK(to_bf16(0x7f7f7fffu) == 0x7f7f);
  CHECK(to_bf16(INFINITY) == 0x7f80);
  CHECK(to_bf16(-INFINITY) == 0xff80);
  // A NaN stays a NaN (never inf, even with its payload in the dropped bits), quiet,
  // with its sign and the top of its payload.
  CHECK(to_bf16(0x7fc00000u) == 0x7fc0);
  CHECK(to_bf16(0x7f800001u) == 0x7fc0);
  CHECK(to_bf16(0x7fa00000u) == 0x7fe0);
  CHECK(to_bf16(0xff800001u) == 0xffc0);
  CHECK(to_bf16(0x7fffffffu) == 0x7fff);
  // bf16 -> float is the upper half, exactly.
  CHECK(from_bf16(0x3f80) == float_bits(1.0f));
  CHECK(from_bf16(0x8000) == 0x80000000u);
  CHECK(from_bf16(0x0001) == 0x00010000u);
  CHECK(from_bf16(0x7f80) == 0x7f800000u);
  CHECK(from_bf16(0x7f81) == 0x7f810000u);  // signalling stays signalling
  CHECK(from_bf16(0xffc1) == 0xffc10000u);
}

TEST_CASE("stochastic bf16: rounds up with probability equal to the discarded fraction") {
  using strata::detail::float_to_bf16_stochastic;
  // Over all 2^16 noise values, the count that rounds away from zero is exactly the
  // discarded 16 bits: 0 for a bf16 value, 0x4000 for a quarter of the way, and so on.
  for (const std::uint32_t u : {0x3f800000u, 0x3f804000u, 0x3f808000u, 0x3f80c000u, 0x3f80ffffu, 0x3f810001u,
                                0xbf804000u, 0x00000001u, 0x7f000100u}) {
    std::uint32_t ups = 0, others = 0;
    const auto lo = static_cast<std::uint16_t>(u >> 16);
    for (std::uint32_t noise = 0; noise < 65536; ++noise) {
      const std::uint16_t r = float_to_bf16_stochastic(bits_float(u), noise);
      if (r == lo + 1)
        ++ups;
      else if (r != lo)
        ++others;
    }
    INFO("input bits " << std::hex << u);
    CHECK(others == 0);
    CHECK(ups == (u & 0xffffu));
  }
  // Noise 0 truncates; all-ones rounds every inexact value up; bits above 16 are ignored.
  CHECK(float_to_bf16_stochastic(bits_float(0x3f80ffffu), 0) == 0x3f80);
  CHECK(float_to_bf16_stochastic(bits_float(0x3f800001u), 0xffffu) == 0x3f81);
  CHECK(float_to_bf16_stochastic(bits_float(0x3f80ffffu), 0xffff0000u) == 0x3f80);
  CHECK(float_to_bf16_stochastic(1.0f, 0xffffffffu) == 0x3f80);
  // inf and NaN take no noise: they come out as round-to-nearest gives them.
  for (const std::uint32_t noise : {0u, 0x8000u, 0xffffu, 0xffffffffu}) {
    CHECK(float_to_bf16_stochastic(INFINITY, noise) == 0x7f80);
    CHECK(float_to_bf16_stochastic(-INFINITY, noise) == 0xff80);
    CHECK(float_to_bf16_stochastic(bits_float(0x7f800001u), noise) == 0x7fc0);
    CHECK(float_to_bf16_stochastic(bits_float(0xffffffffu), noise) == 0xffff);
  }
}

TEST_CASE("round_to<T>: nearest even for 16-bit types, plain conversion otherwise") {
  STATIC_REQUIRE(std::is_same_v<decltype(strata::round_to<fp16>(1.0f)), fp16>);
  STATIC_REQUIRE(std::is_same_v<decltype(strata::round_to<bf16>(1.0f)), bf16>);
  STATIC_REQUIRE(std::is_same_v<decltype(strata::round_to<double>(1.0f)), double>);
  for (const std::uint32_t u : {0x3f808000u, 0x3f818000u, 0x33000001u, 0x477ff000u, 0x7f800001u, 0x80000000u}) {
    const float f = bits_float(u);
    CHECK(strata::round_to<fp16>(f).bits == fp16(f).bits);
    CHECK(strata::round_to<bf16>(f).bits == bf16(f).bits);
    CHECK(float_bits(strata::round_to<float>(f)) == u);  // identity, NaN payload included
  }
  CHECK(strata::round_to<double>(0.1f) == static_cast<double>(0.1f));
  // Usable in constant expressions, subnormal path (a float addition) included.
  STATIC_REQUIRE(strata::round_to<fp16>(1.0f).bits == 0x3c00);
  STATIC_REQUIRE(strata::round_to<fp16>(0x3p-25f).bits == 0x0002);
  STATIC_REQUIRE(strata::round_to<fp16>(65520.0f).bits == 0x7c00);
  STATIC_REQUIRE(strata::round_to<bf16>(1.0f).bits == 0x3f80);
  STATIC_REQUIRE(float(fp16::from_bits(0x0001)) == 0x1p-24f);
  STATIC_REQUIRE(float(fp16::from_bits(0x7bff)) == 65504.0f);
}

TEST_CASE("fp16 and bf16 as types") {
  // From float only explicitly (the rounding is visible), to float implicitly.
  STATIC_REQUIRE(!std::is_convertible_v<float, fp16>);
  STATIC_REQUIRE(!std::is_convertible_v<float, bf16>);
  STATIC_REQUIRE(std::is_convertible_v<fp16, float>);
  STATIC_REQUIRE(std::is_convertible_v<bf16, float>);
  STATIC_REQUIRE(sizeof(fp16) == 2);
  STATIC_REQUIRE(sizeof(bf16) == 2);
  CHECK(fp16().bits == 0);
  CHECK(bf16().bits == 0);
  // == compares bit patterns: the two zeros differ, a NaN equals itself.
  CHECK_FALSE(fp16(0.0f) == fp16(-0.0f));
  CHECK(fp16::from_bits(0x7e00) == fp16(NAN));
  CHECK(bf16::from_bits(0x7fc0) == bf16::from_bits(0x7fc0));
  CHECK(fp16::from_bits(0x3c00) == fp16(1.0f));
}

TEST_CASE("dtype: sizes, safetensors names, parsing") {
  struct row {
    dtype t;
    std::size_t size;
    std::string_view name;
  };
  const row rows[] = {{dtype::f32, 4, "F32"}, {dtype::f64, 8, "F64"}, {dtype::bf16, 2, "BF16"}, {dtype::f16, 2, "F16"},
                      {dtype::i32, 4, "I32"}, {dtype::i64, 8, "I64"}, {dtype::u8, 1, "U8"},     {dtype::u16, 2, "U16"},
                      {dtype::u32, 4, "U32"}, {dtype::u64, 8, "U64"}, {dtype::i8, 1, "I8"},     {dtype::i16, 2, "I16"}};
  for (const row& r : rows) {
    INFO(r.name);
    CHECK(strata::size_of(r.t) == r.size);
    CHECK(strata::name_of(r.t) == r.name);
    dtype parsed = r.t == dtype::f32 ? dtype::i8 : dtype::f32;
    CHECK(strata::parse_dtype(r.name, parsed));
    CHECK(parsed == r.t);
  }
  // Names are the format's, exactly: another case, spacing or an unknown name is refused
  // and leaves the output alone.
  for (const std::string_view bad : {"f32", "F32 ", " F32", "", "BOOL", "F8_E4M3", "FP16", "bfloat16"}) {
    INFO("'" << bad << "'");
    dtype out = dtype::u16;
    CHECK_FALSE(strata::parse_dtype(bad, out));
    CHECK(out == dtype::u16);
  }
  STATIC_REQUIRE(strata::size_of(dtype::bf16) == 2);
  STATIC_REQUIRE(strata::name_of(dtype::f16) == "F16");
}

TEST_CASE("dtype_v names each element type, cv-qualified ones included") {
  STATIC_REQUIRE(strata::dtype_v<float> == dtype::f32);
  STATIC_REQUIRE(strata::dtype_v<double> == dtype::f64);
  STATIC_REQUIRE(strata::dtype_v<bf16> == dtype::bf16);
  STATIC_REQUIRE(strata::dtype_v<fp16> == dtype::f16);
  STATIC_REQUIRE(strata::dtype_v<const fp16> == dtype::f16);
  STATIC_REQUIRE(strata::dtype_v<volatile float> == dtype::f32);
  STATIC_REQUIRE(strata::dtype_v<std::int32_t> == dtype::i32);
  STATIC_REQUIRE(strata::dtype_v<std::int64_t> == dtype::i64);
  STATIC_REQUIRE(strata::dtype_v<std::uint8_t> == dtype::u8);
  STATIC_REQUIRE(strata::dtype_v<std::uint16_t> == dtype::u16);
  STATIC_REQUIRE(strata::dtype_v<std::uint32_t> == dtype::u32);
  STATIC_REQUIRE(strata::dtype_v<std::uint64_t> == dtype::u64);
  STATIC_REQUIRE(strata::dtype_v<std::int8_t> == dtype::i8);
  STATIC_REQUIRE(strata::dtype_v<std::int16_t> == dtype::i16);
  // The tag's size is the type's.
  STATIC_REQUIRE(strata::size_of(strata::dtype_v<fp16>) == sizeof(fp16));
  STATIC_REQUIRE(strata::size_of(strata::dtype_v<double>) == sizeof(double));
  STATIC_REQUIRE(strata::size_of(strata::dtype_v<std::uint64_t>) == sizeof(std::uint64_t));
}
