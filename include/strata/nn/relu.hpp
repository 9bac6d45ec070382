// nn::relu: max(x, 0) elementwise, a layer without params (torch.nn.ReLU; the gradient
// at exactly 0 is 0, as in torch).
#pragma once
#include <cstdint>
#include <string>

#include "../space/tensor.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct relu {
  struct cache {
    const tensor<float>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  template <class Ctx>
  void forward(Ctx&, const tensor<float>& x, tensor<float>& y, cache& c) const {
    nn::detail::require_distinct(&x, &y, "relu", std::string());
    y.resize(x.shape());
    const float* xp = x.data();
    float* yp = y.data();
    nn::detail::elementwise(static_cast<std::int64_t>(x.numel()),
                            [=](std::int64_t i) { yp[i] = xp[i] > 0.0f ? xp[i] : 0.0f; });
    c.x = &x;
  }

  template <class Ctx>
  void backward(Ctx&, const tensor<float>& dy, tensor<float>& dx, cache& c) {
    nn::detail::require_forward_ran(c.x, "relu", std::string());
    nn::detail::require_dy(dy, c.x->shape(), "relu", std::string());
    nn::detail::require_distinct(&dy, &dx, "relu", std::string());
    dx.resize(c.x->shape());
    const float* xp = c.x->data();
    const float* g = dy.data();
    float* dxp = dx.data();
    nn::detail::elementwise(static_cast<std::int64_t>(dy.numel()),
                            [=](std::int64_t i) { dxp[i] = xp[i] > 0.0f ? g[i] : 0.0f; });
  }
};

}  // namespace strata::nn
