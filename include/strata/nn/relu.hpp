// nn::relu: max(x, 0) elementwise, a layer without params (torch.nn.ReLU; the gradient
// at exactly 0 is 0, as in torch).
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct relu {
  template <class Space = host>
  struct cache {
    const tensor<float, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    nn::detail::require_distinct(&x, &y, "relu", std::string());
    y.resize(x.shape());
    const auto n = static_cast<std::int64_t>(x.numel());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      const float* xp = x.data();
      float* yp = y.data();
      nn::detail::elementwise(n, [=](std::int64_t i) { yp[i] = xp[i] > 0.0f ? xp[i] : 0.0f; });
    } else {
      nn::detail::device_ops_for<space_of<Ctx>>::relu_forward(ctx.exec(), n, x.data(), y.data());
    }
    c.x = &x;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.x, "relu", std::string());
    nn::detail::require_dy(dy, c.x->shape(), "relu", std::string());
    nn::detail::require_distinct(&dy, &dx, "relu", std::string());
    dx.resize(c.x->shape());
    const auto n = static_cast<std::int64_t>(dy.numel());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      const float* xp = c.x->data();
      const float* g = dy.data();
      float* dxp = dx.data();
      nn::detail::elementwise(n, [=](std::int64_t i) { dxp[i] = xp[i] > 0.0f ? g[i] : 0.0f; });
    } else {
      nn::detail::device_ops_for<space_of<Ctx>>::relu_backward(ctx.exec(), n, c.x->data(), dy.data(), dx.data());
    }
  }
};

}  // namespace strata::nn
