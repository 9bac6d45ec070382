// strata::math: the transcendental functions of the layers' elementwise math (exp, expm1,
// tanh, erf, and sigmoid from exp), written once for host and device like the
// functors that call them. A device compiles them to CUDA's own functions. On x86-64 the
// host calls SLEEF (Debian's libsleef), and loops over them vectorize: each function is
// declared with GCC's simd attribute, so a vectorized loop calls its 4-, 8- or 16-lane
// form, the one of the instruction set the loop is compiled for (space/host_isa.hpp picks
// that per CPU). libm's scalar functions cost 5 to 25 ns an element; SLEEF's AVX-512
// forms 1 to 6 (why SLEEF: docs/architecture.md, "Host elementwise math").
//
// Every form, the scalar one included, runs SLEEF's FMA-free code, which performs the
// same IEEE operations at every width: an element's bits depend neither on the SIMD width
// the CPU offers nor on where the element falls in a vector or a loop's remainder.
// Accuracy: within 1 ulp of the exact result (SLEEF's u10 functions); the tests sweep each
// against libm, NaN and infinities included.
#pragma once
#include <cmath>

#include "config.hpp"

#if defined(__x86_64__) && !defined(STRATA_NO_SLEEF)
#define STRATA_HAS_SLEEF 1
#include <immintrin.h>
#else
#define STRATA_HAS_SLEEF 0
#endif

#if STRATA_HAS_SLEEF
// SLEEF's entry points, declared here because sleef.h declares each width only where the
// translation unit is compiled for it (and these are called from code that is not).
// "nofma": the forms without fused multiply-adds, identical in bits across widths.
#define STRATA_SLEEF_DECLARE(name)                  \
  __m128 Sleef_##name##f4_u10sse2(__m128);          \
  __m256 Sleef_##name##f8_u10avx(__m256);           \
  __m512 Sleef_##name##f16_u10avx512fnofma(__m512); \
  __attribute__((simd("notinbranch"), const, nothrow)) float strata_sleef_##name##f(float);

extern "C" {
STRATA_SLEEF_DECLARE(exp)
STRATA_SLEEF_DECLARE(expm1)
STRATA_SLEEF_DECLARE(tanh)
STRATA_SLEEF_DECLARE(erf)
}
#undef STRATA_SLEEF_DECLARE

namespace strata::math::detail {
// The definitions behind strata_sleef_<name>f and its vector forms, under the symbol names
// GCC's vector function ABI gives them (_ZGV, then b/c/d/e for SSE2/AVX/AVX2/AVX-512, N
// and the lanes, v for one vector argument). Inline and used: emitted, as weak symbols,
// in every translation unit that includes this header, so no library is built.
#define STRATA_SLEEF_DEFINE(name)                                                                                      \
  [[gnu::used]] inline float name##_1(float x) __asm__("strata_sleef_" #name "f");                                     \
  inline float name##_1(float x) { return _mm_cvtss_f32(Sleef_##name##f4_u10sse2(_mm_set1_ps(x))); }                   \
  [[gnu::used]] inline __m128 name##_b(__m128 x) __asm__("_ZGVbN4v_strata_sleef_" #name "f");                          \
  inline __m128 name##_b(__m128 x) { return Sleef_##name##f4_u10sse2(x); }                                             \
  [[gnu::used, gnu::target("avx")]] inline __m256 name##_c(__m256 x) __asm__("_ZGVcN8v_strata_sleef_" #name "f");      \
  [[gnu::target("avx")]] inline __m256 name##_c(__m256 x) { return Sleef_##name##f8_u10avx(x); }                       \
  [[gnu::used, gnu::target("avx2")]] inline __m256 name##_d(__m256 x) __asm__("_ZGVdN8v_strata_sleef_" #name "f");     \
  [[gnu::target("avx2")]] inline __m256 name##_d(__m256 x) { return Sleef_##name##f8_u10avx(x); }                      \
  [[gnu::used, gnu::target("avx512f")]] inline __m512 name##_e(__m512 x) __asm__("_ZGVeN16v_strata_sleef_" #name "f"); \
  [[gnu::target("avx512f")]] inline __m512 name##_e(__m512 x) { return Sleef_##name##f16_u10avx512fnofma(x); }

STRATA_SLEEF_DEFINE(exp)
STRATA_SLEEF_DEFINE(expm1)
STRATA_SLEEF_DEFINE(tanh)
STRATA_SLEEF_DEFINE(erf)
#undef STRATA_SLEEF_DEFINE
}  // namespace strata::math::detail
#endif

namespace strata::math {

#if STRATA_HAS_SLEEF && !defined(__CUDA_ARCH__)
#define STRATA_MATH_FN(name, device_fn) \
  STRATA_HOST_DEVICE inline float name(float x) { return strata_sleef_##name##f(x); }
#else
#define STRATA_MATH_FN(name, device_fn) \
  STRATA_HOST_DEVICE inline float name(float x) { return device_fn(x); }
#endif
STRATA_MATH_FN(exp, ::expf)
STRATA_MATH_FN(expm1, ::expm1f)
STRATA_MATH_FN(tanh, ::tanhf)
STRATA_MATH_FN(erf, ::erff)
#undef STRATA_MATH_FN

// 1 / (1 + e^-x): 0 below about -88 (e^-x overflows to inf), 1 above about 17.
STRATA_HOST_DEVICE inline float sigmoid(float x) { return 1.0f / (1.0f + exp(-x)); }

}  // namespace strata::math
