// Precision policies: fp32 everywhere, or mixed<bf16|fp16> (16-bit params and grads
// for compute and communication, fp32 master weights and moments).
#pragma once
#include <type_traits>

#include "../core/dtype.hpp"

namespace strata {

struct fp32 {
  using compute_type = float;
  static constexpr bool is_mixed = false;
  static constexpr bool uses_loss_scaling = false;
  static constexpr const char* name = "fp32";
};

template <class T>
struct mixed {
  static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, fp16>,
                "strata::mixed<T>: T must be strata::bf16 or strata::fp16");
  using compute_type = T;
  static constexpr bool is_mixed = true;
  // fp16's narrow range needs a dynamic loss scale; bf16 has fp32's exponent range.
  static constexpr bool uses_loss_scaling = std::is_same_v<T, fp16>;
  static constexpr const char* name = std::is_same_v<T, bf16> ? "bf16" : "fp16";
};

template <class P>
concept precision_policy = requires {
  typename P::compute_type;
  { P::is_mixed } -> std::convertible_to<bool>;
};

}  // namespace strata
