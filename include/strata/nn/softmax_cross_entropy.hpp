// nn::softmax_cross_entropy: the mean over rows of -log softmax(logits)[target], the
// classification loss of torch.nn.CrossEntropyLoss, as the last layer of a model.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct softmax_cross_entropy {
  template <class Space = host>
  struct cache {
    const tensor<float, Space>* logits = nullptr;  // the input, kept alive by the trainer until backward
    // Per row: the max m and log(sum exp(x - m)), kept apart because a float m + log(...)
    // would round away the softmax's precision when logits are large (ulp(1e4) ~ 1e-3).
    tensor<float, Space> row_max;
    tensor<float, Space> log_sum;
    tensor<float, Space> target;     // [rows]: a copy, so backward needs no ctx state
    tensor<double, Space> row_loss;  // [rows]: summed in a fixed order for the mean
    // Outside the host only: [1], the first row whose target is not a class id, found by
    // the kernels (the targets are not readable here) and read back after the forward.
    tensor<unsigned long long, Space> bad_row;
  };

  // logits [..., C] and targets of the leading shape ([B] for [B, C], [B, S] for
  // [B, S, C]) holding class ids in [0, C) -> y [1] = mean loss over rows.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& logits, tensor_for<Ctx>& y,
               cache<space_of<Ctx>>& c) const {
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      loss(logits, ctx.targets(), y, c);
    } else {
      const tensor_for<Ctx>& targets = ctx.targets();
      const auto [rows, classes] = check_inputs(logits, targets, y);
      c.row_max.resize(nn::detail::vector_shape(rows));
      c.log_sum.resize(nn::detail::vector_shape(rows));
      c.target.resize(nn::detail::vector_shape(rows));
      c.row_loss.resize(nn::detail::vector_shape(rows));
      c.bad_row.resize(nn::detail::vector_shape(1));
      y.resize(nn::detail::vector_shape(1));
      const nn::detail::target_check bad = nn::detail::device_ops_for<space_of<Ctx>>::cross_entropy_forward(
          ctx.exec(), rows, classes, logits.data(), targets.data(), c.row_max.data(), c.log_sum.data(),
          c.target.data(), c.row_loss.data(), c.bad_row.data(), y.data());
      if (bad.row >= 0) [[unlikely]]
        fail_target(bad.value, bad.row, classes);
      c.logits = &logits;
    }
  }

  // dx = dy[0] * (softmax(logits) - onehot(target)) / rows.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.logits, "softmax_cross_entropy", std::string());
    nn::detail::require_dy(dy, nn::detail::vector_shape(1), "softmax_cross_entropy", std::string());
    nn::detail::require_distinct(&dy, &dx, "softmax_cross_entropy", std::string());
    const tensor_for<Ctx>& x = *c.logits;
    const std::int64_t classes = x.shape()[x.shape().rank - 1], rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      const float scale = rows ? dy[0] / static_cast<float>(rows) : 0.0f;
      const float *xp = x.data(), *mp = c.row_max.data(), *lp = c.log_sum.data(), *tp = c.target.data();
      float* dxp = dx.data();
      nn::detail::for_rows(rows, classes, [&](std::int64_t r) {
        const float* xr = xp + r * classes;
        float* dr = dxp + r * classes;
        const float m = mp[r], l = lp[r];
#pragma omp simd
        for (std::int64_t j = 0; j < classes; ++j) dr[j] = scale * std::exp((xr[j] - m) - l);
        dr[static_cast<std::int64_t>(tp[r])] -= scale;
      });
    } else {
      // dy[0] is read by the kernel: the loss scale stays on the device.
      nn::detail::device_ops_for<space_of<Ctx>>::cross_entropy_backward(
          ctx.exec(), rows, classes, x.data(), c.row_max.data(), c.log_sum.data(), c.target.data(), dy.data(),
          dx.data());
    }
  }

  // The forward without a context (on the host): the loss of logits against explicit
  // targets.
  void loss(const tensor<float>& logits, const tensor<float>& targets, tensor<float>& y, cache<>& c) const {
    const auto [rows, classes] = check_inputs(logits, targets, y);
    const float* tp = targets.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float t = tp[r];
      if (!(t >= 0.0f && t < static_cast<float>(classes) && t == std::floor(t))) [[unlikely]]
        fail_target(t, r, classes);
    }
    c.row_max.resize(nn::detail::vector_shape(rows));
    c.log_sum.resize(nn::detail::vector_shape(rows));
    c.target.resize(nn::detail::vector_shape(rows));
    c.row_loss.resize(nn::detail::vector_shape(rows));
    const float* xp = logits.data();
    float *mp = c.row_max.data(), *lp = c.log_sum.data(), *cp = c.target.data();
    double* rl = c.row_loss.data();
    nn::detail::for_rows(rows, classes, [&](std::int64_t r) {
      const float* xr = xp + r * classes;
      // Subtracting the row max keeps every exp in (0, 1]: no overflow for any logits.
      float m = xr[0];
#pragma omp simd reduction(max : m)
      for (std::int64_t j = 0; j < classes; ++j) m = xr[j] > m ? xr[j] : m;
      double se = 0.0;
#pragma omp simd reduction(+ : se)
      for (std::int64_t j = 0; j < classes; ++j) se += std::exp(xr[j] - m);
      const double ls = std::log(se);
      const auto t = static_cast<std::int64_t>(tp[r]);
      mp[r] = m;
      lp[r] = static_cast<float>(ls);
      cp[r] = tp[r];
      rl[r] = (static_cast<double>(m) - static_cast<double>(xr[t])) + ls;
    });
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) total += rl[r];
    y.resize(nn::detail::vector_shape(1));
    y[0] = rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.0f;
    c.logits = &logits;
  }

 private:
  struct extents {
    std::int64_t rows, classes;
  };

  // The checks of both spaces; only shapes are read.
  template <class Space>
  static extents check_inputs(const tensor<float, Space>& logits, const tensor<float, Space>& targets,
                              const tensor<float, Space>& y) {
    const std::string none;
    nn::detail::require_distinct(&logits, &y, "softmax_cross_entropy", none);
    const auto& s = logits.shape();
    if (s.rank == 0 || s[s.rank - 1] == 0) [[unlikely]]
      nn::detail::fail(strata::detail::cat("softmax_cross_entropy: logits have shape ", s,
                                           "; expected [..., classes] with classes > 0"),
                       std::source_location::current());
    const std::int64_t classes = s[s.rank - 1], rows = nn::detail::rows_of(s);
    if (static_cast<std::int64_t>(targets.numel()) != rows || targets.shape().rank + 1 != s.rank) [[unlikely]]
      nn::detail::fail(strata::detail::cat("softmax_cross_entropy: targets have shape ", targets.shape(),
                                           " for logits ", s, "; expected one class id per row, shape ",
                                           leading(s)),
                       std::source_location::current());
    return {rows, classes};
  }

  [[noreturn]] static void fail_target(float t, std::int64_t r, std::int64_t classes) {
    nn::detail::fail<error>(strata::detail::cat("softmax_cross_entropy: target ", t, " at row ", r,
                                                " is not a class id in [0, ", classes, ")"),
                            std::source_location::current());
  }

  static shape leading(shape s) {
    --s.rank;
    return s;
  }
};

}  // namespace strata::nn
