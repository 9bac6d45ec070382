// The callback of a weight walk: the trainer's walk (train/) and the exports that consume
// it (io/, models/) name one type, so a walk and its consumers cannot drift apart.
#pragma once
#include <cstddef>
#include <span>

#include "../core/function_ref.hpp"

namespace strata::detail {

// f(param index, first element, values): one piece of a param's full tensor.
using weight_piece_fn = function_ref<void(std::size_t, std::size_t, std::span<const float>)>;
// walk(f): calls f for every piece of the weights, in param order.
using weight_pieces = function_ref<void(weight_piece_fn)>;

}  // namespace strata::detail
