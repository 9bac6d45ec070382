// Deterministic parameter initialisation: element i of a param is a function of
// (seed, param name, i) only, so any rank can fill exactly the elements it owns and
// every process layout starts from the same weights.
#pragma once
#include <cstdint>
#include <string_view>

#include "../core/random.hpp"
#include "../model/param.hpp"

namespace strata::detail {

// The key of a param's stream: random_stream(seed, name).key().
inline std::uint64_t init_key(std::uint64_t seed, std::string_view name) { return random_stream(seed, name).key(); }

// Value of element i of a param whose stream has this key.
inline float init_value(const init_spec& spec, std::uint64_t key, std::uint64_t i) {
  const auto stream = random_stream::from_key(key);
  switch (spec.k) {
    case init_spec::kind::zeros: return 0.0f;
    case init_spec::kind::ones: return 1.0f;
    case init_spec::kind::constant: return spec.scale;
    case init_spec::kind::uniform: return static_cast<float>((2.0 * stream.uniform(i) - 1.0) * spec.scale);
    case init_spec::kind::normal: return static_cast<float>(stream.normal(i) * spec.scale);
  }
  return 0.0f;
}

}  // namespace strata::detail
