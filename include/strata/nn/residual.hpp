// nn::add_into: a += b over tensors of one shape, in the context's space: the residual
// connections a model writes between its layers (x + attn(norm(x))). The sum is in
// float; 16-bit activations round it once.
#pragma once
#include <cstdint>

#include "../space/tensor.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

template <class Ctx>
void add_into(Ctx& ctx, tensor_for<Ctx>& a, const tensor_for<Ctx>& b) {
  expects<config_error>(a.shape() == b.shape(), [&] {
    return strata::cat("add_into: a has shape ", a.shape(), " and b ", b.shape(), "; they must match");
  });
  ops_of<Ctx>::add_into(exec_of(ctx), static_cast<std::int64_t>(a.numel()), a.data(), b.data());
}

}  // namespace strata::nn
