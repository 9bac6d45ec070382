// The widest SIMD instruction set the host's loops run on: the build targets baseline
// x86-64 (SSE2), and ops<host> compiles each loop once more for AVX2 and for AVX-512,
// choosing per call by this CPU (space/host_ops.hpp). STRATA_HOST_SIMD=sse2|avx2|avx512
// caps it (never above what the CPU has); the report states the one in use.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace strata {

enum class host_isa : unsigned char { sse2, avx2, avx512 };

inline const char* name_of(host_isa i) {
  switch (i) {
    case host_isa::avx512: return "avx512";
    case host_isa::avx2: return "avx2";
    case host_isa::sse2: break;
  }
  return "sse2";
}

namespace detail {

inline host_isa cpu_host_isa() {
#if defined(__x86_64__)
  __builtin_cpu_init();  // libgcc also checks that the OS saves the wider registers
  if (__builtin_cpu_supports("avx512f")) return host_isa::avx512;
  if (__builtin_cpu_supports("avx2")) return host_isa::avx2;
#endif
  return host_isa::sse2;
}

inline host_isa initial_host_isa() {
  const host_isa cpu = cpu_host_isa();
  const char* env = std::getenv("STRATA_HOST_SIMD");
  if (!env || !*env) return cpu;
  const std::string_view v(env);
  for (host_isa i : {host_isa::sse2, host_isa::avx2, host_isa::avx512})
    if (v == name_of(i)) return i < cpu ? i : cpu;
  // Read before any loop runs, where throwing would be too late to be useful: a warning.
  std::fprintf(stderr, "strata: warning: STRATA_HOST_SIMD=%s is not sse2, avx2 or avx512; using %s\n", env,
               name_of(cpu));
  return cpu;
}

// The one in use; tests set it to compare widths (never above cpu_host_isa()).
inline host_isa& current_host_isa() {
  static host_isa isa = initial_host_isa();
  return isa;
}

}  // namespace detail

// The instruction set ops<host> runs its loops on now.
inline host_isa host_simd() { return detail::current_host_isa(); }

}  // namespace strata
