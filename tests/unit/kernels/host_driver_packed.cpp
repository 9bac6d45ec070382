// The host driver's packed tile path gives the bits of its scalar path (today's tiles,
// whose 16-bit conversions are core/dtype.hpp's) for every input: the 8-wide conversions
// over all 65536 fp16 and bf16 patterns and all 2^32 floats (and, with FTZ and DAZ set,
// every 16-bit pattern and the floats of fp16's subnormal range), and AdamW through
// run_split over every 16-bit grad pattern against a dense sweep of masters (NaNs,
// infinities, subnormals, ties, overflow), at several sizes and thread counts, with the
// fused operator() (the CUDA driver's form) as a third opinion. Where the processor has no
// AVX2, the conversion checks are skipped with a warning and the driver checks compare
// the fallback path with operator().
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "mix_bits.hpp"
#include "strata/kernels/adamw.hpp"
#include "strata/kernels/host_driver.hpp"

namespace k = strata::kernels;
using strata::bf16;
using strata::fp16;
using strata::detail::bits_float;
using strata::detail::float_bits;

namespace {

#if defined(STRATA_DETAIL_PACKED)
constexpr bool packed_compiled = true;
#else
constexpr bool packed_compiled = false;
#endif

bool have_packed() {
  if (!k::detail::host_has_packed()) WARN("this processor has no AVX2 and F16C: only the scalar path runs");
  return k::detail::host_has_packed();
}

// core/dtype.hpp's conversions of the 16-bit type H, the reference of the packed ones.
template <class H>
float to_float(std::uint16_t bits) {
  if constexpr (std::is_same_v<H, fp16>)
    return strata::detail::fp16_to_float(bits);
  else
    return strata::detail::bf16_to_float(bits);
}
template <class H>
std::uint16_t from_float(float f) {
  if constexpr (std::is_same_v<H, fp16>)
    return strata::detail::float_to_fp16_rne(f);
  else
    return strata::detail::float_to_bf16_rne(f);
}

#if defined(STRATA_DETAIL_PACKED)
template <class H>
void packed_to_float(const H* in, float* out) {
  if constexpr (std::is_same_v<H, fp16>)
    k::detail::fp16x8_to_float(in, out);
  else
    k::detail::bf16x8_to_float(in, out);
}
template <class H>
void packed_from_float(const float* in, H* out) {
  if constexpr (std::is_same_v<H, fp16>)
    k::detail::float8_to_fp16(in, out);
  else
    k::detail::float8_to_bf16(in, out);
}

// Every pattern of H through the packed conversion, in groups of 8 so that NaNs share
// groups with numbers, against core's.
template <class H>
std::uint32_t to_float_mismatches() {
  std::vector<H> in(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) in[i] = H::from_bits(static_cast<std::uint16_t>(i));
  std::vector<float> out(65536);
  for (std::size_t j = 0; j < 65536; j += 8) packed_to_float(in.data() + j, out.data() + j);
  std::uint32_t bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i)
    bad += float_bits(out[i]) != float_bits(to_float<H>(static_cast<std::uint16_t>(i)));
  return bad;
}

// Floats with bits [lo, lo + count) through the packed conversion to H against core's
// round to nearest even (in a simd loop, as the scalar path runs it); returns the
// mismatches and lowers `first` to the smallest mismatching input.
template <class H>
std::uint64_t from_float_mismatches(std::uint64_t lo, std::uint64_t count, std::uint32_t& first) {
  constexpr std::size_t block = 4096;
  alignas(32) float x[block];
  alignas(32) H h[block];
  alignas(32) std::uint16_t want[block];
  std::uint64_t bad = 0;
  for (std::uint64_t b = lo; b < lo + count; b += block) {
    const auto base = static_cast<std::uint32_t>(b);
#pragma omp simd
    for (std::uint32_t j = 0; j < block; ++j) {
      x[j] = bits_float(base + j);
      want[j] = from_float<H>(x[j]);
    }
    for (std::size_t j = 0; j < block; j += 8) packed_from_float(x + j, h + j);
    if (std::memcmp(h, want, sizeof want) == 0) continue;
    for (std::uint32_t j = 0; j < block; ++j)
      if (h[j].bits != want[j]) ++bad, first = std::min(first, base + j);
  }
  return bad;
}
#endif

// The AdamW functor's arrays, owned by the test: grads and params of the 16-bit type H.
template <class H>
struct adam_arrays {
  std::vector<float> master, m, v;
  std::vector<H> grad, out;
};

bool is_nan(float f) { return std::isnan(f); }
bool is_nan(fp16 h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x03ffu) != 0; }
bool is_nan(bf16 h) { return (h.bits & 0x7f80u) == 0x7f80u && (h.bits & 0x007fu) != 0; }

// "" when a and b hold the same bits, else which arrays differ: how many elements, the
// first index, its two bit patterns, its grad and b's updated master there. With `start`
// (the arrays both began from), an element whose grad and m or v were both NaN may hold
// a different NaN in each: which NaN a sum of two NaNs gives is the compiler's choice of
// operand order for a commutative instruction (GCC 12 and 14 choose differently here).
template <class H>
std::string differences(const adam_arrays<H>& a, const adam_arrays<H>& b, const adam_arrays<H>* start = nullptr) {
  std::ostringstream s;
  const auto nan_meets_nan = [&](std::size_t i) {
    return start && is_nan(start->grad[i]) && (is_nan(start->m[i]) || is_nan(start->v[i]));
  };
  auto field = [&](const char* name, const auto& x, const auto& y) {
    std::size_t count = 0, first = 0;
    for (std::size_t i = x.size(); i-- > 0;)
      if (std::memcmp(&x[i], &y[i], sizeof x[i]) != 0 && !(nan_meets_nan(i) && is_nan(x[i]) && is_nan(y[i])))
        ++count, first = i;
    if (count == 0) return;
    std::uint32_t bx = 0, by = 0;
    std::memcpy(&bx, &x[first], sizeof x[first]);
    std::memcpy(&by, &y[first], sizeof y[first]);
    s << name << ": " << count << " differ, first at " << first << " (" << std::hex << std::showbase << bx << " vs "
      << by << std::dec << std::noshowbase << ", grad " << std::hex << std::showbase << a.grad[first].bits
      << ", master " << strata::detail::float_bits(b.master[first]) << std::dec << std::noshowbase << "); ";
  };
  field("master", a.master, b.master);
  field("m", a.m, b.m);
  field("v", a.v, b.v);
  field("out", a.out, b.out);
  return s.str();
}

template <k::write_mode W, class H>
k::adamw_update<H, H, W> adam_on(adam_arrays<H>& a, float grad_scale, float decay_factor, float step_size) {
  return {a.master.data(),
          a.grad.data(),
          a.m.data(),
          a.v.data(),
          a.out.data(),
          grad_scale,
          0.9f,
          0.1f,
          0.999f,
          0.001f,
          decay_factor,
          step_size,
          1.25f,
          1e-8f,
          0x1234'5678'9abc'def0ull,
          77};
}

using strata_test::mix_bits;

// n elements: grad i is pattern (i * 40503 + i / 65536) mod 2^16 of H, so every block of
// 65536 holds every pattern, each block paired with other masters. Master i has as its
// top 20 bits (sign, exponent, fp16's mantissa and its rounding bit, which hold bf16's)
// i mod 2^20, so the first 2^20 elements sweep every such prefix: zeros, float and fp16
// subnormals, ties to even and odd, 65504 to 65520 and beyond, infinities, NaNs of both
// signs and kinds; the low 12 bits (below fp16's tie bit) take, per block of 2^20, one of:
// zero (exact ties), the smallest and largest non-zero values, and mixed bits. The moments have mixed
// magnitudes; with special_moments some are NaNs (of both signs, with payloads) or
// infinities.
template <class H>
adam_arrays<H> sweep(std::size_t n, bool special_moments) {
  adam_arrays<H> a;
  a.master.resize(n), a.m.resize(n), a.v.resize(n), a.grad.resize(n), a.out.resize(n);
  constexpr std::uint32_t lows[] = {0x000u, 0x001u, 0xfffu, 0x800u, 0x7ffu, 0x801u, 0x555u, 0xaaau};
  for (std::size_t i = 0; i < n; ++i) {
    const auto u = static_cast<std::uint32_t>(i);
    a.grad[i] = H::from_bits(static_cast<std::uint16_t>(u * 40503u + (u >> 16)));
    a.master[i] = bits_float(((u & 0xfffffu) << 12) | lows[(u >> 20) % 8]);
    const std::uint32_t r = mix_bits(u);
    a.m[i] = bits_float((r & 0x807fffffu) | (((r >> 23) % 60u + 97u) << 23));           // |m| in [2^-30, 2^30)
    a.v[i] = bits_float((mix_bits(r) & 0x007fffffu) | (((r >> 8) % 70u + 67u) << 23));  // v in [2^-60, 2^10)
    if (special_moments && r % 61 == 0) a.m[i] = bits_float(0x7f800000u | (mix_bits(r) & 0x807fffffu) | 1u);  // NaNs
    if (special_moments && r % 67 == 1) a.v[i] = bits_float(0x7f800000u | (mix_bits(r + 1) & 0x807fffffu) | 1u);
    if (special_moments && r % 71 == 2) a.m[i] = r & 8 ? INFINITY : -INFINITY;
    if (special_moments && r % 73 == 3) a.v[i] = INFINITY;
    a.out[i] = H::from_bits(0x5555);
  }
  return a;
}

// The step configurations: a plain one; a grad scale so large that the larger grads'
// squares overflow (v goes to inf, steps to 0 or NaN); step size 0 with no decay, where
// the new param is the master itself (p * 1 - (0 m) / d) wherever m and d are finite, so
// the masters of the sweep meet the 16-bit rounding unchanged.
struct config {
  const char* name;
  float grad_scale, decay_factor, step_size;
};
constexpr config configs[] = {
    {"plain", 1.0f, 0.999f, 1e-3f}, {"scaled grads", 1e16f, 1.0f, 0.5f}, {"identity", 1.0f, 1.0f, 0.0f}};

}  // namespace

TEMPLATE_TEST_CASE("packed 16-bit -> float: every pattern gives core's bits", "", fp16, bf16) {
  if (!packed_compiled || !have_packed()) return;
#if defined(STRATA_DETAIL_PACKED)
  CHECK(to_float_mismatches<TestType>() == 0);
#endif
}

TEMPLATE_TEST_CASE("packed float -> 16-bit: every float gives core's round to nearest even", "", fp16, bf16) {
  if (!packed_compiled || !have_packed()) return;
#if defined(STRATA_DETAIL_PACKED)
  constexpr std::uint64_t slice = std::uint64_t{1} << 24;
  std::uint64_t bad = 0;
  std::uint32_t first = 0xffffffffu;
#pragma omp parallel for schedule(dynamic, 1) reduction(+ : bad) reduction(min : first)
  for (std::int64_t s = 0; s < 256; ++s) bad += from_float_mismatches<TestType>(std::uint64_t(s) * slice, slice, first);
  INFO(std::hex << std::showbase << "first mismatching float bits: " << first);
  CHECK(bad == 0);
#endif
}

TEMPLATE_TEST_CASE("packed conversions with FTZ and DAZ set give the same bits as the scalar ones", "", fp16, bf16) {
  if (!packed_compiled || !have_packed()) return;
#if defined(STRATA_DETAIL_PACKED)
  // A program built with -ffast-math starts with both set (crtfastmath.o). MXCSR is per
  // thread: this runs on the calling thread only, over every 16-bit pattern, every float
  // subnormal and every float from 2^-26 to 2^-13 (fp16's subnormal range and the values
  // that round into it or to zero), of both signs.
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
  const std::uint32_t to_float_bad = to_float_mismatches<TestType>();
  std::uint32_t first = 0xffffffffu;
  std::uint64_t from_float_bad = 0;
  for (const std::uint64_t sign : {0x0u, 0x80000000u}) {
    from_float_bad += from_float_mismatches<TestType>(sign, 0x00800000u, first);
    from_float_bad += from_float_mismatches<TestType>(sign | 0x32800000u, 0x39000000u - 0x32800000u, first);
  }
  _mm_setcsr(saved);
  INFO(std::hex << std::showbase << "first mismatching float bits: " << first);
  CHECK(to_float_bad == 0);
  CHECK(from_float_bad == 0);
#endif
}

// The 16-bit copy is the rounding of the updated master, element by element.
template <class H>
std::size_t copies_not_rounded(const adam_arrays<H>& a) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.master.size(); ++i) bad += a.out[i].bits != from_float<H>(a.master[i]);
  return bad;
}

static_assert(k::detail::packed_converts<k::adamw_update<fp16, fp16, k::write_mode::nearest_even>>);
static_assert(k::detail::packed_converts<k::adamw_update<fp16, fp16, k::write_mode::stochastic>>);     // grads
static_assert(k::detail::packed_converts<k::adamw_update<fp16, float, k::write_mode::nearest_even>>);  // params
static_assert(k::detail::packed_converts<k::adamw_update<bf16, bf16, k::write_mode::nearest_even>>);
static_assert(k::detail::packed_converts<k::adamw_update<bf16, bf16, k::write_mode::stochastic>>);     // grads
static_assert(k::detail::packed_converts<k::adamw_update<bf16, float, k::write_mode::nearest_even>>);  // params
static_assert(!k::detail::packed_converts<k::adamw_update<bf16, float, k::write_mode::stochastic>>);
static_assert(!k::detail::packed_converts<k::adamw_update<float, float, k::write_mode::none>>);

TEMPLATE_TEST_CASE("adamw 16-bit: run_split's packed tiles, its scalar tiles and operator() give the same bits", "",
                   fp16, bf16) {
  using H = TestType;
  const bool packed = have_packed();
  // The full sweep (8 blocks of 2^20 and a tail that is no multiple of the tile), one
  // block and a bit, and sizes around the tile and the parallel threshold.
  const std::size_t sizes[] = {(std::size_t{8} << 20) + 13,     (std::size_t{1} << 20) + 37, 65536, 15, 16, 17, 40,
                               k::detail::host_parallel_min + 3};
  for (const bool special_moments : {false, true})
    for (const config& c : configs)
      for (const std::size_t n : sizes)
        for (const int threads : {1, 2}) {
          if (threads == 2 && n < k::detail::host_parallel_min) continue;                 // one thread runs it anyway
          if (n > (std::size_t{2} << 20) && (special_moments || threads == 1)) continue;  // time
          omp_set_num_threads(threads);
          const adam_arrays<H> start = sweep<H>(n, special_moments);
          adam_arrays<H> fused = start, scalar = start, tiled = start, dispatched = start;
          const auto f = [&](adam_arrays<H>& a) {
            return adam_on<k::write_mode::nearest_even>(a, c.grad_scale, c.decay_factor, c.step_size);
          };
          const bool parallel = n >= k::detail::host_parallel_min;
          k::detail::run_split(n, f(scalar), parallel, false);
          if (packed) k::detail::run_split(n, f(tiled), parallel, true);
          k::run_host(n, f(dispatched));
          INFO((special_moments ? "NaN and inf moments, " : "finite moments, ")
               << c.name << ", n " << n << ", threads " << threads);
          const adam_arrays<H>* nans = special_moments ? &start : nullptr;
          if (packed) CHECK(differences(tiled, scalar, nans) == "");
          CHECK(differences(dispatched, scalar, nans) == "");
          CHECK(copies_not_rounded(scalar) == 0);
          // The fused form, operator(), as the CUDA driver runs it. Where a NaN moment
          // meets a NaN grad in m's or v's sum, which of the two NaNs comes out is the
          // compiler's choice of operand order for a commutative instruction, and the
          // tiles and the fused loop already differ there; elsewhere all three agree.
          if (!special_moments) {
            const auto fused_f = f(fused);
            for (std::size_t i = 0; i < n; ++i) fused_f(i);
            CHECK(differences(fused, scalar) == "");
          }
        }
}

TEMPLATE_TEST_CASE("adamw 16-bit grads with stochastic rounding: packed grads in, the scalar write out, same bits", "",
                   fp16, bf16) {
  using H = TestType;
  const bool packed = have_packed();
  const std::size_t n = (std::size_t{1} << 20) + 5;
  omp_set_num_threads(2);
  for (const bool special_moments : {false, true})
    for (const config& c : configs) {
      const adam_arrays<H> start = sweep<H>(n, special_moments);
      adam_arrays<H> scalar = start, tiled = start;
      k::detail::run_split(n, adam_on<k::write_mode::stochastic>(scalar, c.grad_scale, c.decay_factor, c.step_size),
                           true, false);
      if (packed)
        k::detail::run_split(n, adam_on<k::write_mode::stochastic>(tiled, c.grad_scale, c.decay_factor, c.step_size),
                             true, true);
      INFO((special_moments ? "NaN and inf moments, " : "finite moments, ") << c.name);
      if (packed) CHECK(differences(tiled, scalar, special_moments ? &start : nullptr) == "");
    }
}
