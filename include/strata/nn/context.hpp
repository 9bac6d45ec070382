// What the nn/ layers ask of the trainer's context: the space it computes in (its
// space_type) and, for loss layers, the current micro-batch's targets in that space.
#pragma once
#include <concepts>
#include <type_traits>

#include "../model/param.hpp"
#include "../space/tensor.hpp"

namespace strata::nn {

namespace detail {
template <class Ctx>
using weight_type_of = typename Ctx::weight_type;
}  // namespace detail

// The element type a context's layers read their weights as: float, or the 16-bit
// compute type of a mixed-precision GPU trainer (its ctx's weight_type), whose compute
// params live in 16 bits. Gradients stay float either way.
template <class Ctx>
using weight_of =
    typename strata::detail::context_member<std::remove_cvref_t<Ctx>, float, detail::weight_type_of>::type;

// A param's values as the context's trainer stores them: the trainer binds data_ptr to
// weight_of<Ctx> values, so a layer reads its weights through this and never p.data()
// (a float pointer would misread 16-bit storage).
template <class Ctx, class T>
const weight_of<Ctx>* weights_of(const param<T>& p) noexcept {
  if constexpr (std::is_same_v<weight_of<Ctx>, T>)
    return p.data();
  else
    return reinterpret_cast<const weight_of<Ctx>*>(p.data());
}

// Targets are floats in the context's space: class ids for softmax_cross_entropy (exact
// below 2^24), values for mse.
template <class Ctx>
concept targets_context = requires(Ctx& ctx) {
  { ctx.targets() } -> std::convertible_to<const float_tensor_for<Ctx>&>;
};

}  // namespace strata::nn
