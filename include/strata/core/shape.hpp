// Shapes of up to four dimensions: the extents of params and activations.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <string>

#include "error.hpp"

namespace strata {

struct shape {
  static constexpr std::size_t max_rank = 4;
  std::array<std::int64_t, max_rank> dims{};
  std::size_t rank = 0;

  constexpr shape() = default;
  shape(std::initializer_list<std::int64_t> d) {
    expects<config_error>(d.size() <= max_rank,
                          [&] { return strata::cat("shape of rank ", d.size(), ": at most 4 dimensions"); });
    for (auto v : d) {
      expects<config_error>(v >= 0, [&] { return strata::cat("shape extent ", v, " is negative"); });
      dims[rank++] = v;
    }
  }
  constexpr std::int64_t operator[](std::size_t i) const { return dims[i]; }
  constexpr std::int64_t& operator[](std::size_t i) { return dims[i]; }
  constexpr std::size_t numel() const {
    std::size_t n = 1;
    for (std::size_t i = 0; i < rank; ++i) n *= static_cast<std::size_t>(dims[i]);
    return n;
  }
  constexpr bool operator==(const shape& o) const {
    if (rank != o.rank) return false;
    for (std::size_t i = 0; i < rank; ++i)
      if (dims[i] != o.dims[i]) return false;
    return true;
  }
  std::string str() const {
    std::string s = "[";
    for (std::size_t i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  }
  friend std::ostream& operator<<(std::ostream& os, const shape& s) { return os << s.str(); }
};

namespace detail {
// [n] for sizes known to be valid: a constexpr shape with none of the checks of the
// initializer-list constructor.
constexpr shape vector_shape(std::int64_t n) {
  shape s;
  s.rank = 1;
  s[0] = n;
  return s;
}
}  // namespace detail

}  // namespace strata
