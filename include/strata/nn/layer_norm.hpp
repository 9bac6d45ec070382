// nn::layer_norm: normalisation over the last dimension with a learned scale and shift
// (torch.nn.LayerNorm: biased variance, eps inside the square root, weight 1, bias 0).
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct layer_norm {
  param<float> weight;  // [dim], init ones
  param<float> bias;    // [dim], init zeros
  float eps = 1e-5f;

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
    tensor<float, Space> mean;                // [rows]
    tensor<float, Space> rstd;                // [rows]: 1 / sqrt(var + eps)
  };

  std::int64_t dim() const noexcept { return weight.shape[0]; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    check_params();
    const std::int64_t d = dim();
    nn::detail::require_features(x, d, "layer_norm", weight.name, "weight");
    nn::detail::require_distinct(&x, &y, "layer_norm", weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    y.resize(x.shape());
    c.mean.resize(nn::detail::vector_shape(rows));
    c.rstd.resize(nn::detail::vector_shape(rows));
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      forward_rows(rows, x.data(), y.data(), c.mean.data(), c.rstd.data());
    } else {
      nn::detail::device_ops_for<space_of<Ctx>>::layer_norm_forward(ctx.exec(), rows, d, eps, x.data(), weight.data(),
                                                                     bias.data(), y.data(), c.mean.data(),
                                                                     c.rstd.data());
    }
    c.x = &x;
  }

  // With xhat = (x - mean) * rstd and g = dy * weight:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
  //   weight.grad += sum over rows of dy * xhat, bias.grad += sum over rows of dy.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.x, "layer_norm", weight.name);
    check_params();
    nn::detail::require_grad(weight, "layer_norm", weight.name, "weight");
    nn::detail::require_grad(bias, "layer_norm", weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    nn::detail::require_dy(dy, x.shape(), "layer_norm", weight.name);
    nn::detail::require_distinct(&dy, &dx, "layer_norm", weight.name);
    const std::int64_t d = dim(), rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      backward_rows(rows, x.data(), dy.data(), dx.data(), c.mean.data(), c.rstd.data());
    } else {
      nn::detail::device_ops_for<space_of<Ctx>>::layer_norm_backward(ctx.exec(), rows, d, x.data(), dy.data(),
                                                                      weight.data(), c.mean.data(), c.rstd.data(),
                                                                      dx.data(), weight.grad(), bias.grad());
    }
  }

 private:
  // The host's loops, outside the templates: one copy whatever the context type.
  void forward_rows(std::int64_t rows, const float* xp, float* yp, float* mp, float* rp) const {
    const std::int64_t d = dim();
    const float *w = weight.data(), *b = bias.data();
    const double inv_d = 1.0 / static_cast<double>(d);
    const double e = eps;
    nn::detail::for_rows(rows, d, [&](std::int64_t r) {
      const float* xr = xp + r * d;
      // Two passes in double: the one-pass E[x^2] - E[x]^2 cancels badly when |mean| >> std.
      double s = 0.0;
#pragma omp simd reduction(+ : s)
      for (std::int64_t j = 0; j < d; ++j) s += xr[j];
      const double mean = s * inv_d;
      double v = 0.0;
#pragma omp simd reduction(+ : v)
      for (std::int64_t j = 0; j < d; ++j) v += (xr[j] - mean) * (xr[j] - mean);
      const float m = static_cast<float>(mean);
      const float rs = static_cast<float>(1.0 / std::sqrt(v * inv_d + e));
      mp[r] = m;
      rp[r] = rs;
      float* yr = yp + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    });
  }

  void backward_rows(std::int64_t rows, const float* xp, const float* g, float* dxp, const float* mp,
                     const float* rp) {
    const std::int64_t d = dim();
    const float* w = weight.data();
    const double inv_d = 1.0 / static_cast<double>(d);
    nn::detail::for_rows(rows, d, [&](std::int64_t r) {
      const float *xr = xp + r * d, *gr = g + r * d;
      const float m = mp[r], rs = rp[r];
      double sg = 0.0, sgx = 0.0;
#pragma omp simd reduction(+ : sg, sgx)
      for (std::int64_t j = 0; j < d; ++j) {
        const float gw = gr[j] * w[j];
        sg += gw;
        sgx += gw * ((xr[j] - m) * rs);
      }
      const float a = static_cast<float>(sg * inv_d), bb = static_cast<float>(sgx * inv_d);
      float* dxr = dxp + r * d;
#pragma omp simd
      for (std::int64_t j = 0; j < d; ++j) dxr[j] = rs * (gr[j] * w[j] - a - (xr[j] - m) * rs * bb);
    });
    nn::detail::add_column_sums(rows, d, weight.grad(), [=](std::int64_t i, std::int64_t j) {
      return g[i * d + j] * ((xp[i * d + j] - mp[i]) * rp[i]);
    });
    nn::detail::add_column_sums(rows, d, bias.grad(), [=](std::int64_t i, std::int64_t j) { return g[i * d + j]; });
  }

  void check_params() const {
    if (weight.shape.rank != 1 || !(bias.shape == weight.shape) || !(eps > 0.0f)) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label("layer_norm", weight.name), ": weight ", weight.shape,
                                           ", bias ", bias.shape, ", eps ", eps,
                                           "; expected weight and bias [dim] and eps > 0"),
                       std::source_location::current());
    nn::detail::require_bound(weight, "layer_norm", weight.name, "weight");
    nn::detail::require_bound(bias, "layer_norm", weight.name, "bias");
  }
};

inline layer_norm make_layer_norm(int dim, float eps = 1e-5f) {
  strata::expects<config_error>(dim > 0, strata::detail::cat("make_layer_norm(", dim, "): dim must be positive"));
  strata::expects<config_error>(eps > 0.0f, strata::detail::cat("make_layer_norm: eps ", eps, " must be positive"));
  return layer_norm{param<float>(shape{dim}, init_spec::ones()), param<float>(shape{dim}, init_spec::zeros()), eps};
}

}  // namespace strata::nn
