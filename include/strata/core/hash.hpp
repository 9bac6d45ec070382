// The hashes strata fingerprints, checks and draws with: FNV-1a over bytes, splitmix64's
// mix, and 64-bit values as hex text. Usable on host and device.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "config.hpp"

namespace strata {

inline constexpr std::uint64_t fnv1a_offset = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t fnv1a_prime = 0x100000001b3ull;

// FNV-1a: h folded with one byte.
STRATA_HOST_DEVICE constexpr std::uint64_t fnv1a_byte(std::uint64_t h, std::uint8_t byte) {
  return (h ^ byte) * fnv1a_prime;
}
constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = fnv1a_offset) {
  for (char c : s) h = fnv1a_byte(h, static_cast<std::uint8_t>(c));
  return h;
}

// splitmix64's finalizer: a bijective 64-bit mix with full avalanche.
STRATA_HOST_DEVICE constexpr std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// 2^64 / phi, splitmix64's increment.
inline constexpr std::uint64_t golden64 = 0x9e3779b97f4a7c15ull;

// splitmix64's output for state x: a counter-based random 64 bits.
STRATA_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) { return mix64(x + golden64); }

// 16 lowercase hex digits, as checkpoints and reports print hashes.
inline std::string hex64(std::uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

}  // namespace strata
