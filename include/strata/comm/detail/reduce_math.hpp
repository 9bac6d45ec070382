// The arithmetic of a reduction, shared by the backends that reduce on the host (MPI's
// user-defined ops for bf16/fp16, Gloo's reduce functions): each pairwise step in the
// element type, bf16/fp16 through float with rounding to nearest even.
#pragma once
#include <cstddef>
#include <type_traits>

#include "../../core/dtype.hpp"
#include "../reduce_op.hpp"

namespace strata::detail {

struct f_sum {
  template <class T>
  T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct f_max {  // NaN propagates, as with MPI_MAX on float in practice
  template <class T>
  T operator()(T a, T b) const {
    return (a != a || a > b) ? a : b;
  }
};
struct f_min {
  template <class T>
  T operator()(T a, T b) const {
    return (a != a || a < b) ? a : b;
  }
};

template <class T>
inline constexpr bool is_half_v = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

// out[i] = f(a[i], b[i]); out may be a or b.
template <class T, class F>
void combine(T* out, const T* a, const T* b, std::size_t n) {
  const F f;
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (is_half_v<T>)
      out[i] = T(f(static_cast<float>(a[i]), static_cast<float>(b[i])));
    else
      out[i] = f(a[i], b[i]);
  }
}

// avg: the sum divided by the number of ranks, in the element type.
template <class T>
void divide_by_size(void* data, std::size_t n, int size) {
  T* x = static_cast<T*>(data);
  if constexpr (is_half_v<T>) {
    const float s = static_cast<float>(size);
    for (std::size_t i = 0; i < n; ++i) x[i] = T(static_cast<float>(x[i]) / s);
  } else {
    const T s = static_cast<T>(size);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<T>(x[i] / s);
  }
}

}  // namespace strata::detail
