// What the nn/ layers ask of the trainer's context: only loss layers use it, to read
// the current micro-batch's targets.
#pragma once
#include <concepts>

#include "../space/tensor.hpp"

namespace strata::nn {

// Targets are floats: class ids for softmax_cross_entropy (exact below 2^24), values
// for mse.
template <class Ctx>
concept targets_context = requires(Ctx& ctx) {
  { ctx.targets() } -> std::convertible_to<const tensor<float>&>;
};

}  // namespace strata::nn
