// The host driver of kernels/: runs an elementwise functor over a flat shard with
// OpenMP threads (static schedule) and SIMD lanes, vectorized under ordinary -O2/-O3,
// and with packed conversions of 16-bit grads and params (F16C's for fp16, AVX2 integer
// steps for bf16) where the processor has AVX2.
#pragma once
#include <omp.h>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <type_traits>

#include "../core/dtype.hpp"
#include "rounding.hpp"
#include "scalar_math.hpp"

#if defined(__x86_64__) || defined(_M_X64) || defined(__SSE2__)
#include <immintrin.h>
#define STRATA_DETAIL_SQRT_X86 1
// The packed tiles (AVX2, F16C) are compiled in with a target attribute (the library is
// built for baseline x86-64) and used where the processor has them, checked at run time.
#if defined(__GNUC__)
#define STRATA_DETAIL_PACKED 1
#endif
#elif defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define STRATA_DETAIL_SQRT_NEON 1
#endif

namespace strata::kernels {

namespace detail {

// Below this many elements one thread does the work: a fork/join costs more.
inline constexpr std::size_t host_parallel_min = std::size_t{1} << 15;
// Elements per tile of a functor split at a square root. The tile's roots live in a
// stack array (registers or L1), so the split adds no memory traffic. A small constant
// tile lets the compiler unroll the three phases into straight-line code whose packed
// roots and divisions the out-of-order core overlaps with the neighbouring tiles'
// arithmetic: measured on a 2-core EPYC, 16 runs AdamW about 1.4x faster than 512,
// where each phase runs alone and the divider idles during the other two.
inline constexpr std::size_t host_sqrt_tile = 16;

// A functor split at a square root (adamw_update): pre_sqrt(i) updates what it can and
// returns the argument of the root (>= 0), post_sqrt(i, root) finishes element i, and
// f(i) is the two fused, the form for a tail shorter than a tile.
template <class F>
concept split_at_sqrt = requires(const F& f, std::size_t i, float r) {
  { f.pre_sqrt(i) } -> std::same_as<float>;
  f.post_sqrt(i, r);
  f(i);
};

// Replaces x[0, n) by its square roots with packed, correctly rounded instructions.
// They have no errno path, which is the point: a sqrt call inside a loop does not
// vectorize under the default -fmath-errno of GCC and clang (see scalar_math.hpp).
STRATA_FORCEINLINE void sqrt_tile(float* x, std::size_t n) {
  std::size_t j = 0;
#if defined(STRATA_DETAIL_SQRT_X86)
#if defined(__AVX__)
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(x + j, _mm256_sqrt_ps(_mm256_loadu_ps(x + j)));
#endif
  for (; j + 4 <= n; j += 4) _mm_storeu_ps(x + j, _mm_sqrt_ps(_mm_loadu_ps(x + j)));
#elif defined(STRATA_DETAIL_SQRT_NEON)
  for (; j + 4 <= n; j += 4) vst1q_f32(x + j, vsqrtq_f32(vld1q_f32(x + j)));
#endif
  for (; j < n; ++j) x[j] = sqrt_nonneg(x[j]);
}

// A split functor that also takes its grad as a float and hands back its updated fp32
// param (adamw_update): pre_sqrt_of(i, grad[i] as float), post_sqrt_master(i, root) ->
// the param, write_out(i, param) for the 16-bit copy. With these the driver converts a
// whole tile of 16-bit grads in and params out with packed instructions, where the
// functor's own exact conversions cost about ten instructions an element
// (strata::detail::fp16_to_float, float_to_fp16_rne, float_to_bf16_rne at baseline SSE2).
template <class F>
concept split_with_conversions = split_at_sqrt<F> && requires(const F& f, std::size_t i, float x) {
  typename F::grad_type;
  typename F::param_type;
  { F::write } -> std::convertible_to<write_mode>;
  { f.grad } -> std::convertible_to<const typename F::grad_type*>;
  { f.param_out } -> std::convertible_to<typename F::param_type*>;
  { f.pre_sqrt_of(i, x) } -> std::same_as<float>;
  { f.post_sqrt_master(i, x) } -> std::same_as<float>;
  f.write_out(i, x);
};

// Whether the packed tiles would convert something of F: 16-bit grads, or 16-bit params
// rounded to nearest even (stochastic rounding stays on the functor's own write).
template <class F>
inline constexpr bool packed_converts = [] {
  if constexpr (split_with_conversions<F>)
    return std::is_same_v<typename F::grad_type, fp16> || std::is_same_v<typename F::grad_type, bf16> ||
           ((std::is_same_v<typename F::param_type, fp16> || std::is_same_v<typename F::param_type, bf16>) &&
            F::write == write_mode::nearest_even);
  else
    return false;
}();

// Whether this processor (and its OS, which must save the AVX registers) has AVX2 and
// F16C, which the packed tiles are compiled for; asked once. Every processor with AVX2
// has F16C; those with F16C and no AVX2 (Ivy Bridge, AMD's Piledriver) take the baseline
// tiles, the same bits.
inline bool host_has_packed() {
#if defined(STRATA_DETAIL_PACKED)
  // __builtin_cpu_init: in case the first step runs in a static constructor, before
  // libgcc's own.
  static const bool yes = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c"));
  return yes;
#else
  return false;
#endif
}

#if defined(STRATA_DETAIL_PACKED)
#define STRATA_DETAIL_TARGET_PACKED __attribute__((target("avx2,f16c")))

// The F16C conversions of 8 elements, with fix-ups that give the bits of
// strata::detail::fp16_to_float and float_to_fp16_rne for every input
// (tests/unit/kernels/host_driver_packed.cpp checks all of them). Both are exact or
// rounded to nearest even alike on every number, subnormals and overflow to inf
// included; they differ on NaNs only:
// - fp16 -> float: F16C quiets a signalling NaN (sets the float's bit 22), the contract
//   keeps it signalling. NaN grads are rare (the trainer skips a step whose gradient norm
//   is not finite), so a group holding one is redone by the scalar conversion itself, on
//   a branch otherwise never taken;
// - float -> fp16: F16C keeps the top ten payload bits, the contract drops them (sign |
//   0x7e00): masked off, and the quiet bit set, in the lanes whose result is a NaN.
STRATA_DETAIL_TARGET_PACKED inline void fp16x8_to_float(const fp16* in, float* out) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  _mm256_storeu_ps(out, _mm256_cvtph_ps(h));
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
  if (_mm_movemask_epi8(nan) != 0) [[unlikely]]
    for (int k = 0; k < 8; ++k) out[k] = strata::detail::fp16_to_float(in[k].bits);
}

STRATA_DETAIL_TARGET_PACKED inline void float8_to_fp16(const float* in, fp16* out) {
  const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT);
  const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(h, _mm_set1_epi16(0x7fff)), _mm_set1_epi16(0x7c00));
  const __m128i fixed = _mm_or_si128(_mm_andnot_si128(_mm_and_si128(nan, _mm_set1_epi16(0x01ff)), h),
                                     _mm_and_si128(nan, _mm_set1_epi16(0x0200)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), fixed);
}

// bf16 has no conversion instruction before AVX-512 BF16 (whose round flushes subnormals,
// so its bits are not core/dtype.hpp's): these are bf16_to_float's shift and
// float_to_bf16_rne's integer steps 8 lanes wide, the same bits for every input
// (tests/unit/kernels/host_driver_packed.cpp checks all of them). On the baseline tiles
// bf16 AdamW took 1.5x fp32 AdamW's time on one thread (bench/optimizer, 2^24 params),
// fp16 on the F16C tiles 1.1x; on these both take about fp32's.
STRATA_DETAIL_TARGET_PACKED inline void bf16x8_to_float(const bf16* in, float* out) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
  _mm256_storeu_ps(out, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
}

STRATA_DETAIL_TARGET_PACKED inline void float8_to_bf16(const float* in, bf16* out) {
  const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(in));
  const __m256i nan =
      _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rne = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7fff)));
  const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256i r = _mm256_srli_epi32(_mm256_blendv_epi8(rne, quiet, nan), 16);
  // packus keeps each 128-bit half apart: [r0..r3 r0..r3 | r4..r7 r4..r7]; the 64-bit
  // permute brings r4..r7 next to r0..r3.
  const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(packed));
}

// Tiles [begin, end) of a split functor: grads converted in, the three phases of
// run_host's tile, params converted out. Compiled for AVX2, so its simd loops are 8 wide;
// not for FMA, which would fuse the functor's multiply-adds and change its bits.
template <class F>
STRATA_DETAIL_TARGET_PACKED void packed_tiles(const F& f, std::size_t begin, std::size_t end) {
  using G = typename F::grad_type;
  using P = typename F::param_type;
  constexpr bool params_out = F::write == write_mode::nearest_even;
  constexpr std::size_t tile = host_sqrt_tile;
  static_assert(tile % 8 == 0, "strata: the packed conversions take 8 elements at a time");
  for (std::size_t t = begin; t < end; ++t) {
    const std::size_t lo = t * tile;
    alignas(64) float x[tile];
    if constexpr (std::is_same_v<G, fp16>) {
      for (std::size_t j = 0; j < tile; j += 8) fp16x8_to_float(f.grad + lo + j, x + j);
    } else if constexpr (std::is_same_v<G, bf16>) {
      for (std::size_t j = 0; j < tile; j += 8) bf16x8_to_float(f.grad + lo + j, x + j);
    } else {
#pragma omp simd
      for (std::size_t j = 0; j < tile; ++j) x[j] = static_cast<float>(f.grad[lo + j]);
    }
#pragma omp simd
    for (std::size_t j = 0; j < tile; ++j) x[j] = f.pre_sqrt_of(lo + j, x[j]);
    for (std::size_t j = 0; j < tile; j += 8) _mm256_store_ps(x + j, _mm256_sqrt_ps(_mm256_load_ps(x + j)));
#pragma omp simd
    for (std::size_t j = 0; j < tile; ++j) x[j] = f.post_sqrt_master(lo + j, x[j]);
    if constexpr (params_out && std::is_same_v<P, fp16>) {
      for (std::size_t j = 0; j < tile; j += 8) float8_to_fp16(x + j, f.param_out + lo + j);
    } else if constexpr (params_out && std::is_same_v<P, bf16>) {
      for (std::size_t j = 0; j < tile; j += 8) float8_to_bf16(x + j, f.param_out + lo + j);
    } else {
#pragma omp simd
      for (std::size_t j = 0; j < tile; ++j) f.write_out(lo + j, x[j]);
    }
  }
}
#undef STRATA_DETAIL_TARGET_PACKED
#endif

// run_host for a functor split at a square root. With packed (the caller has checked the
// processor: host_has_packed), a functor with 16-bit conversions runs packed_tiles;
// otherwise the baseline tiles, whose phases call the functor's own conversions. Both
// give the same bits. The tests call this directly to run both on one machine.
template <class F>
void run_split(std::size_t n, const F& f, bool parallel, [[maybe_unused]] bool packed) {
  constexpr std::size_t tile = host_sqrt_tile;
  const std::size_t tiles = n / tile;
#if defined(STRATA_DETAIL_PACKED)
  if constexpr (packed_converts<F>) {
    if (packed) {
#pragma omp parallel if (parallel)
      {
        const F local = f;
        // The blocks libgomp's `omp for schedule(static)` below gives each thread, so a
        // thread touches the same pages on either path.
        const std::size_t threads = static_cast<std::size_t>(omp_get_num_threads());
        const std::size_t me = static_cast<std::size_t>(omp_get_thread_num());
        const std::size_t q = tiles / threads, r = tiles % threads;
        const std::size_t begin = me * q + std::min(me, r);
        packed_tiles(local, begin, begin + q + (me < r ? 1 : 0));
      }
      for (std::size_t i = tiles * tile; i < n; ++i) f(i);
      return;
    }
  }
#endif
#pragma omp parallel if (parallel)
  {
    const F local = f;
#pragma omp for schedule(static)
    for (std::size_t t = 0; t < tiles; ++t) {
      const std::size_t lo = t * tile;
      alignas(64) float roots[tile];
#pragma omp simd
      for (std::size_t j = 0; j < tile; ++j) roots[j] = local.pre_sqrt(lo + j);
      sqrt_tile(roots, tile);
#pragma omp simd
      for (std::size_t j = 0; j < tile; ++j) local.post_sqrt(lo + j, roots[j]);
    }
  }
  // The last n % tile elements: the fused form, same bits (the root is correctly
  // rounded either way).
  for (std::size_t i = tiles * tile; i < n; ++i) f(i);
}

}  // namespace detail

// Runs f(i) for every i in [0, n): threads take contiguous blocks (static schedule, so a
// thread touches the same pages every step) and each block runs as a SIMD loop. Inside
// an active parallel region, or for small n, the calling thread does it all. Each
// thread works on its own copy of f, so its pointers and scalars sit in registers.
// A functor split at a square root runs in tiles (detail::run_split), with packed
// conversions of its 16-bit grads and params where the processor has AVX2.
template <class F>
void run_host(std::size_t n, const F& f) {
  if (n == 0) return;
  const bool parallel = n >= detail::host_parallel_min && !omp_in_parallel();
  if constexpr (detail::split_at_sqrt<F>) {
    detail::run_split(n, f, parallel, detail::packed_converts<F> && detail::host_has_packed());
  } else {
#pragma omp parallel if (parallel)
    {
      const F local = f;
#pragma omp for simd schedule(static)
      for (std::size_t i = 0; i < n; ++i) local(i);
    }
  }
}

}  // namespace strata::kernels
