// What the nn/ layers ask of the trainer's context: the space it computes in (its
// space_type) and, for loss layers, the current micro-batch's targets in that space.
#pragma once
#include <concepts>

#include "../space/tensor.hpp"

namespace strata::nn {

// Targets are floats in the context's space: class ids for softmax_cross_entropy (exact
// below 2^24), values for mse.
template <class Ctx>
concept targets_context = requires(Ctx& ctx) {
  { ctx.targets() } -> std::convertible_to<const tensor_for<Ctx>&>;
};

}  // namespace strata::nn
