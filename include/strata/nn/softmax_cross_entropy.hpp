// nn::softmax_cross_entropy: the mean over rows of -log softmax(logits)[target], the
// classification loss of torch.nn.CrossEntropyLoss, as the last layer of a model.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct softmax_cross_entropy {
  struct cache {
    const tensor<float>* logits = nullptr;  // the input, kept alive by the trainer until backward
    // Per row: the max m and log(sum exp(x - m)), kept apart because a float m + log(...)
    // would round away the softmax's precision when logits are large (ulp(1e4) ~ 1e-3).
    tensor<float> row_max;
    tensor<float> log_sum;
    tensor<float> target;     // [rows]: a copy, so backward needs no ctx state
    tensor<double> row_loss;  // [rows]: summed in a fixed order for the mean
  };

  // logits [..., C] and targets of the leading shape ([B] for [B, C], [B, S] for
  // [B, S, C]) holding class ids in [0, C) -> y [1] = mean loss over rows.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor<float>& logits, tensor<float>& y, cache& c) const {
    loss(logits, ctx.targets(), y, c);
  }

  // dx = dy[0] * (softmax(logits) - onehot(target)) / rows.
  template <class Ctx>
  void backward(Ctx&, const tensor<float>& dy, tensor<float>& dx, cache& c) {
    nn::detail::require_forward_ran(c.logits, "softmax_cross_entropy", std::string());
    nn::detail::require_dy(dy, nn::detail::vector_shape(1), "softmax_cross_entropy", std::string());
    nn::detail::require_distinct(&dy, &dx, "softmax_cross_entropy", std::string());
    const tensor<float>& x = *c.logits;
    const std::int64_t classes = x.shape()[x.shape().rank - 1], rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
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
  }

  // The forward without a context: the loss of logits against explicit targets.
  void loss(const tensor<float>& logits, const tensor<float>& targets, tensor<float>& y, cache& c) const {
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
    const float* tp = targets.data();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float t = tp[r];
      if (!(t >= 0.0f && t < static_cast<float>(classes) && t == std::floor(t))) [[unlikely]]
        nn::detail::fail<error>(strata::detail::cat("softmax_cross_entropy: target ", t, " at row ", r,
                                                    " is not a class id in [0, ", classes, ")"),
                                std::source_location::current());
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
  static shape leading(shape s) {
    --s.rank;
    return s;
  }
};

}  // namespace strata::nn
