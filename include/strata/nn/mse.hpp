// nn::mse: the mean over all elements of (x - target)^2, the regression loss of
// torch.nn.MSELoss (reduction "mean"), as the last layer of a model.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct mse {
  template <class Space = host>
  struct cache {
    tensor<float, Space> diff;  // x - target: all that backward needs, and no pointer into ctx
  };

  // x and targets of the same shape -> y [1] = mean of (x - target)^2.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      loss(x, ctx.targets(), y, c);
    } else {
      const tensor_for<Ctx>& targets = ctx.targets();
      check_inputs(x, targets, y);
      c.diff.resize(x.shape());
      y.resize(nn::detail::vector_shape(1));
      nn::detail::device_ops_for<space_of<Ctx>>::mse_forward(ctx.exec(), static_cast<std::int64_t>(x.numel()),
                                                                x.data(), targets.data(), c.diff.data(), y.data());
    }
  }

  // dx = dy[0] * 2 (x - target) / numel.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.diff.shape().rank != 0 ? &c.diff : nullptr, "mse", std::string());
    nn::detail::require_dy(dy, nn::detail::vector_shape(1), "mse", std::string());
    nn::detail::require_distinct(&dy, &dx, "mse", std::string());
    dx.resize(c.diff.shape());
    const auto n = static_cast<std::int64_t>(c.diff.numel());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      const float scale = n ? 2.0f * dy[0] / static_cast<float>(n) : 0.0f;
      const float* d = c.diff.data();
      float* dxp = dx.data();
      nn::detail::elementwise(n, [=](std::int64_t i) { dxp[i] = scale * d[i]; });
    } else {
      // dy[0] is read by the kernel: the loss scale stays on the device.
      nn::detail::device_ops_for<space_of<Ctx>>::mse_backward(ctx.exec(), n, c.diff.data(), dy.data(),
                                                                 dx.data());
    }
  }

  // The forward without a context (on the host): the loss of x against explicit targets.
  void loss(const tensor<float>& x, const tensor<float>& targets, tensor<float>& y, cache<>& c) const {
    check_inputs(x, targets, y);
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

 private:
  // The checks of both spaces; only shapes are read.
  template <class Space>
  static void check_inputs(const tensor<float, Space>& x, const tensor<float, Space>& targets,
                           const tensor<float, Space>& y) {
    nn::detail::require_distinct(&x, &y, "mse", std::string());
    if (!(targets.shape() == x.shape())) [[unlikely]]
      nn::detail::fail(strata::detail::cat("mse: targets have shape ", targets.shape(), ", the input has ",
                                           x.shape(), "; they must match"),
                       std::source_location::current());
  }
};

}  // namespace strata::nn
