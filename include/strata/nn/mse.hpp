// nn::mse: the mean over all elements of (x - target)^2, the regression loss of
// torch.nn.MSELoss (reduction "mean"), as the last layer of a model.
#pragma once
#include <cstdint>
#include <string>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct mse {
  struct cache {
    tensor<float> diff;  // x - target: all that backward needs, and no pointer into ctx
  };

  // x and targets of the same shape -> y [1] = mean of (x - target)^2.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor<float>& x, tensor<float>& y, cache& c) const {
    loss(x, ctx.targets(), y, c);
  }

  // dx = dy[0] * 2 (x - target) / numel.
  template <class Ctx>
  void backward(Ctx&, const tensor<float>& dy, tensor<float>& dx, cache& c) {
    nn::detail::require_forward_ran(c.diff.shape().rank != 0 ? &c.diff : nullptr, "mse", std::string());
    nn::detail::require_dy(dy, nn::detail::vector_shape(1), "mse", std::string());
    nn::detail::require_distinct(&dy, &dx, "mse", std::string());
    dx.resize(c.diff.shape());
    const auto n = static_cast<std::int64_t>(c.diff.numel());
    const float scale = n ? 2.0f * dy[0] / static_cast<float>(n) : 0.0f;
    const float* d = c.diff.data();
    float* dxp = dx.data();
    nn::detail::elementwise(n, [=](std::int64_t i) { dxp[i] = scale * d[i]; });
  }

  // The forward without a context: the loss of x against explicit targets.
  void loss(const tensor<float>& x, const tensor<float>& targets, tensor<float>& y, cache& c) const {
    nn::detail::require_distinct(&x, &y, "mse", std::string());
    if (!(targets.shape() == x.shape())) [[unlikely]]
      nn::detail::fail(strata::detail::cat("mse: targets have shape ", targets.shape(), ", the input has ",
                                           x.shape(), "; they must match"),
                       std::source_location::current());
    const auto n = static_cast<std::int64_t>(x.numel());
    c.diff.resize(x.shape());
    const float *xp = x.data(), *tp = targets.data();
    float* d = c.diff.data();
    nn::detail::elementwise(n, [=](std::int64_t i) { d[i] = xp[i] - tp[i]; });
    // One thread, a fixed vector order: the same sum for any thread count.
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t i = 0; i < n; ++i) s += static_cast<double>(d[i]) * d[i];
    y.resize(nn::detail::vector_shape(1));
    y[0] = n ? static_cast<float>(s / static_cast<double>(n)) : 0.0f;
  }
};

}  // namespace strata::nn
