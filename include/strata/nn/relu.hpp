// nn::relu: max(x, 0) elementwise, a layer without params (torch.nn.ReLU; the gradient
// at exactly 0 is 0, as in torch).
#pragma once
#include <cstdint>
#include <string>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

namespace detail {
// x, y, dy and dx of the activation type T; a value passes unchanged or becomes +0.
template <class T = float>
struct relu_forward_fn {
  const T* x;
  T* y;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    y[i] = static_cast<float>(x[i]) > 0.0f ? x[i] : round_to<T>(0.0f);
  }
};
template <class T = float>
struct relu_backward_fn {
  const T* x;
  const T* dy;
  T* dx;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    dx[i] = static_cast<float>(x[i]) > 0.0f ? dy[i] : round_to<T>(0.0f);
  }
};
}  // namespace detail

struct relu {
  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_distinct(&x, &y, "relu", std::string());
    y.resize(x.shape());
    ops_of<Ctx>::map(exec_of(ctx), static_cast<std::int64_t>(x.numel()),
                     detail::relu_forward_fn<activation_of<Ctx>>{x.data(), y.data()});
    c.x = &x;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, "relu", std::string());
    detail::require_dy(dy, c.x->shape(), "relu", std::string());
    detail::require_distinct(&dy, &dx, "relu", std::string());
    dx.resize(c.x->shape());
    ops_of<Ctx>::map(exec_of(ctx), static_cast<std::int64_t>(dy.numel()),
                     detail::relu_backward_fn<activation_of<Ctx>>{c.x->data(), dy.data(), dx.data()});
  }
};

}  // namespace strata::nn
