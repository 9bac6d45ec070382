// nn::mse: the mean over all elements of (x - target)^2, the regression loss of
// torch.nn.MSELoss (reduction "mean"), as the last layer of a model. The input (and its
// gradient) are the context's activations; the targets, the differences and the loss are
// float whatever those are.
#pragma once
#include <cstdint>
#include <string>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

namespace detail {
// x of type T (float or 16-bit) widened to float; the difference is float.
template <class T = float>
struct difference_fn {
  const T* x;
  const float* t;
  float* d;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const { d[i] = static_cast<float>(x[i]) - t[i]; }
};
// diff^2 in double (exact: a product of two floats fits in a double).
struct square_term {
  const float* d;
  STRATA_HOST_DEVICE double operator()(std::int64_t i) const { return static_cast<double>(d[i]) * d[i]; }
};
// dx = dy[0] * 2 diff / n, with dy read where it is (on a GPU the loss scale stays there),
// computed in float and rounded once to dx's type T.
template <class T = float>
struct mse_backward_fn {
  const float* diff;
  const float* dy;
  T* dx;
  std::int64_t n;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    const float scale = 2.0f * dy[0] / static_cast<float>(n);
    dx[i] = round_to<T>(scale * diff[i]);
  }
};
}  // namespace detail

struct mse {
  // diff stays float whatever the activations (Act): x - target in 16 bits would round
  // away the small differences the loss is made of, and backward needs nothing else.
  template <class Space = host, class Act = float>
  struct cache {
    tensor<float, Space> diff;  // x - target: all that backward needs, and no pointer into ctx
  };

  // x and targets of the same shape -> y [1] = mean of (x - target)^2.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, float_tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    run_forward(exec_of(ctx), x, ctx.targets(), y, c);
  }

  // dx = dy[0] * 2 (x - target) / numel.
  template <class Ctx>
  void backward(Ctx& ctx, const float_tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.diff.shape().rank != 0 ? &c.diff : nullptr, "mse", std::string());
    detail::require_dy(dy, detail::vector_shape(1), "mse", std::string());
    detail::require_distinct(&dy, &dx, "mse", std::string());
    dx.resize(c.diff.shape());
    const auto n = static_cast<std::int64_t>(c.diff.numel());
    ops_of<Ctx>::map(exec_of(ctx), n,
                     detail::mse_backward_fn<activation_of<Ctx>>{c.diff.data(), dy.data(), dx.data(), n});
  }

  // The forward without a context (on the host): the loss of x against explicit targets.
  void loss(const tensor<float>& x, const tensor<float>& targets, tensor<float>& y, cache<>& c) const {
    run_forward(executor<host>{}, x, targets, y, c);
  }

 private:
  template <class Space, class T>
  static void run_forward(const executor<Space>& exec, const tensor<T, Space>& x, const tensor<float, Space>& targets,
                          tensor<float, Space>& y, cache<Space, T>& c) {
    detail::require_distinct(&x, &y, "mse", std::string());
    expects<config_error>(targets.shape() == x.shape(), [&] {
      return strata::cat("mse: targets have shape ", targets.shape(), ", the input has ", x.shape(),
                         "; they must match");
    });
    const auto n = static_cast<std::int64_t>(x.numel());
    c.diff.resize(x.shape());
    y.resize(detail::vector_shape(1));
    ops_for<Space>::map(exec, n, detail::difference_fn<T>{x.data(), targets.data(), c.diff.data()});
    ops_for<Space>::mean(exec, n, detail::square_term{c.diff.data()}, static_cast<double>(n), y.data());
  }
};

}  // namespace strata::nn
