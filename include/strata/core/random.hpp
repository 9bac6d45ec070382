// Deterministic random values by position: value i of a stream depends only on (seed,
// name, i), so any process can draw exactly the values it needs, in any order.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

#include "hash.hpp"

namespace strata {

// A counter-based random stream (splitmix64 over the index, keyed by the seed and the
// stream's name). Parameter initialisation draws from one stream per param name; programs
// draw synthetic data from streams of their own names.
class random_stream {
 public:
  constexpr random_stream(std::uint64_t seed, std::string_view name) : key_(splitmix64(seed) ^ fnv1a(name)) {}
  // The stream whose key() is `key`.
  static constexpr random_stream from_key(std::uint64_t key) noexcept { return random_stream(key); }

  constexpr std::uint64_t key() const noexcept { return key_; }
  // 64 random bits for position i.
  constexpr std::uint64_t bits(std::uint64_t i) const noexcept { return splitmix64(key_ ^ splitmix64(i)); }
  // Uniform in (0, 1) from 53 random bits; never 0, so log() is safe.
  double uniform(std::uint64_t i) const noexcept { return unit_open(bits(i)); }
  // Standard normal for position i: Box-Muller from the uniforms at 2i and 2i + 1.
  double normal(std::uint64_t i) const noexcept {
    const double u1 = uniform(2 * i), u2 = uniform(2 * i + 1);
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

  static double unit_open(std::uint64_t bits) noexcept { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

 private:
  constexpr explicit random_stream(std::uint64_t key) noexcept : key_(key) {}
  std::uint64_t key_;
};

}  // namespace strata
