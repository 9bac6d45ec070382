// N consecutive elements moved as one aligned access (a 16-byte load of four floats, an
// 8-byte one of four 16-bit values), for update functors' vector forms; host and device.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"

namespace strata::kernels::detail {

template <class T, std::size_t N>
struct alignas(sizeof(T) * N) vec {
  T x[N];
  STRATA_HOST_DEVICE static vec load(const T* p) { return *reinterpret_cast<const vec*>(p); }
  STRATA_HOST_DEVICE void store(T* p) const { *reinterpret_cast<vec*>(p) = *this; }
};

// Whether p may be read as vec<T, N> at every multiple of N from it.
template <class T, std::size_t N>
bool aligned_for(const T* p) noexcept {
  return reinterpret_cast<std::uintptr_t>(p) % (sizeof(T) * N) == 0;
}

// The whole vectors of width w inside [begin, end): [first, last), multiples of w (or
// both end, when none fits); the ragged head [begin, first) and tail [last, end) hold
// fewer than w elements each.
struct vector_span {
  std::size_t first, last;
};
STRATA_HOST_DEVICE constexpr vector_span vector_body(std::size_t begin, std::size_t end, std::size_t w) {
  const std::size_t up = (begin + w - 1) / w * w, down = end / w * w;
  const std::size_t first = up < end ? up : end;
  return {first, down > first ? down : first};
}

}  // namespace strata::kernels::detail
