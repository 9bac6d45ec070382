// Deterministic parameter initialisation: element i of a param is a function of
// (seed, param name, i) only, so any rank can fill exactly the elements it owns and
// every process layout starts from the same weights.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

#include "../model/param.hpp"

namespace strata::detail {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr std::uint64_t fnv1a(std::string_view s, std::uint64_t h = 0xcbf29ce484222325ull) {
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

// A uniform double in (0, 1) from 53 random bits; never 0, so log() is safe.
inline double unit_open(std::uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// Value of element i of a param whose key is fnv1a(name) mixed with the seed.
inline float init_value(const init_spec& spec, std::uint64_t key, std::uint64_t i) {
  switch (spec.k) {
    case init_spec::kind::zeros: return 0.0f;
    case init_spec::kind::ones: return 1.0f;
    case init_spec::kind::constant: return spec.scale;
    case init_spec::kind::uniform: {
      const double u = unit_open(splitmix64(key ^ splitmix64(i)));
      return static_cast<float>((2.0 * u - 1.0) * spec.scale);
    }
    case init_spec::kind::normal: {
      // Box-Muller from two independent uniforms of this element.
      const double u1 = unit_open(splitmix64(key ^ splitmix64(2 * i)));
      const double u2 = unit_open(splitmix64(key ^ splitmix64(2 * i + 1)));
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
      return static_cast<float>(z * spec.scale);
    }
  }
  return 0.0f;
}

inline std::uint64_t init_key(std::uint64_t seed, std::string_view name) { return splitmix64(seed) ^ fnv1a(name); }

}  // namespace strata::detail
