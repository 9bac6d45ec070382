// What the nn/ layers ask of the trainer's context: the space it computes in (its
// space_type) and, for loss layers, the current micro-batch's targets in that space.
#pragma once
#include <concepts>

#include "../space/host.hpp"
#include "../space/tensor.hpp"

namespace strata::nn {

namespace detail {

// A context without a space_type (a test's or a user's minimal context that only hands
// out targets) computes on the host: layers written before spaces keep working with it.
template <class Ctx>
struct context_space {
  using type = host;
};
template <class Ctx>
  requires requires { typename Ctx::space_type; }
struct context_space<Ctx> {
  using type = typename Ctx::space_type;
};

}  // namespace detail

// The space a layer runs in for Ctx and the activation tensor of that space. For the
// trainer's context these are exactly space_of<Ctx> and tensor_for<Ctx>.
template <class Ctx>
using layer_space = typename detail::context_space<Ctx>::type;
template <class Ctx>
using layer_tensor = tensor<float, layer_space<Ctx>>;

// Targets are floats in the context's space: class ids for softmax_cross_entropy (exact
// below 2^24), values for mse.
template <class Ctx>
concept targets_context = requires(Ctx& ctx) {
  { ctx.targets() } -> std::convertible_to<const layer_tensor<Ctx>&>;
};

}  // namespace strata::nn
