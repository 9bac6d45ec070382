// nn::layer_norm: normalisation over the last dimension with a learned scale and shift
// (torch.nn.LayerNorm: biased variance, eps inside the square root, weight 1, bias 0).
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "detail/linear_ops.hpp"

namespace strata::nn {

namespace detail {

// y = (x - m) rs w + b of one row, rounded once to T: forward's last pass, and
// forward_again's.
template <class Row, class W, class T>
STRATA_HOST_DEVICE STRATA_FORCEINLINE void layer_norm_scale_row(const Row& row, const T* xr, const W* w, const W* b,
                                                                float m, float rs, T* yr, std::int64_t d) {
  row.for_each(d, [&](std::int64_t j) {
    yr[j] = round_to<T>((static_cast<float>(xr[j]) - m) * rs * static_cast<float>(w[j]) + static_cast<float>(b[j]));
  });
}

// One row: the mean and the variance in two passes in double (the one-pass E[x^2] -
// E[x]^2 cancels badly when |mean| >> std), then y. x and y are of the activation type T
// (read as float, y rounded once), the weights of the context's weight type W.
template <class W = float, class T = float>
struct layer_norm_forward_fn {
  const T* x;
  const W *w, *b;
  T* y;
  float *mean, *rstd;
  std::int64_t d;
  double eps;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = x + r * d;
    const double inv_d = 1.0 / static_cast<double>(d);
    const double mu =
        row.sum(d, [&](std::int64_t j) { return static_cast<double>(static_cast<float>(xr[j])); }) * inv_d;
    const double var = row.sum(d, [&](std::int64_t j) {
      const float xj = static_cast<float>(xr[j]);
      return (xj - mu) * (xj - mu);
    });
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(var * inv_d + eps));
    row.once([&] {
      mean[r] = m;
      rstd[r] = rs;
    });
    layer_norm_scale_row(row, xr, w, b, m, rs, y + r * d, d);
  }
};

// One row of y again from the forward's mean and rstd: the forward's last pass, the same
// bits, for a caller that does not keep y.
template <class W = float, class T = float>
struct layer_norm_apply_fn {
  const T* x;
  const W *w, *b;
  const float *mean, *rstd;
  T* y;
  std::int64_t d;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    layer_norm_scale_row(row, x + r * d, w, b, mean[r], rstd[r], y + r * d, d);
  }
};

// One row of dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w, the means summed
// in double; x, dy and dx of the activation type T, the statistics float.
template <class W = float, class T = float>
struct layer_norm_backward_fn {
  const T *x, *dy;
  const W* w;
  const float *mean, *rstd;
  T* dx;
  std::int64_t d;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T *xr = x + r * d, *gr = dy + r * d;
    const float m = mean[r], rs = rstd[r];
    const double inv_d = 1.0 / static_cast<double>(d);
    const double sg = row.sum(
        d, [&](std::int64_t j) { return static_cast<double>(static_cast<float>(gr[j]) * static_cast<float>(w[j])); });
    const double sgx = row.sum(d, [&](std::int64_t j) {
      const float gw = static_cast<float>(gr[j]) * static_cast<float>(w[j]);
      return static_cast<double>(gw * ((static_cast<float>(xr[j]) - m) * rs));
    });
    const float a = static_cast<float>(sg * inv_d), bb = static_cast<float>(sgx * inv_d);
    T* dxr = dx + r * d;
    row.for_each(d, [&](std::int64_t j) {
      dxr[j] = round_to<T>(
          rs * (static_cast<float>(gr[j]) * static_cast<float>(w[j]) - a - (static_cast<float>(xr[j]) - m) * rs * bb));
    });
  }
};

// The weight gradient's term dy xhat (dy and x of the activation type T).
template <class T = float>
struct layer_norm_weight_term {
  const T *dy, *x;
  const float *mean, *rstd;
  std::int64_t d;
  STRATA_HOST_DEVICE float operator()(std::int64_t i, std::int64_t j) const {
    return static_cast<float>(dy[i * d + j]) * ((static_cast<float>(x[i * d + j]) - mean[i]) * rstd[i]);
  }
};

}  // namespace detail

struct layer_norm {
  param<float> weight;  // [dim], init ones
  param<float> bias;    // [dim], init zeros
  float eps = 1e-5f;

  // The statistics stay float whatever the activations: two numbers a row, where 16 bits
  // would cost the backward accuracy and save next to no memory.
  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
    tensor<float, Space> mean;              // [rows]
    tensor<float, Space> rstd;              // [rows]: 1 / sqrt(var + eps)
  };

  std::int64_t dim() const noexcept { return weight.shape[0]; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_params();
    const std::int64_t d = dim();
    detail::require_features(x, d, "layer_norm", weight.name, "weight");
    detail::require_distinct(&x, &y, "layer_norm", weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    y.resize(x.shape());
    c.mean.resize(detail::vector_shape(rows));
    c.rstd.resize(detail::vector_shape(rows));
    ops_of<Ctx>::rows(exec_of(ctx), rows, d,
                      detail::layer_norm_forward_fn<weight_of<Ctx>, activation_of<Ctx>>{
                          x.data(), weights_of<Ctx>(weight), weights_of<Ctx>(bias), y.data(), c.mean.data(),
                          c.rstd.data(), d, static_cast<double>(eps)});
    c.x = &x;
  }

  // y as the last forward made it, from its input and statistics in the cache: one pass,
  // the same bits, for a caller that keeps y only within a call (call_scratch.hpp).
  template <class Ctx>
  void forward_again(Ctx& ctx, tensor_for<Ctx>& y, const cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_forward_ran(c.x, "layer_norm", weight.name);
    check_params();
    const tensor_for<Ctx>& x = *c.x;
    detail::require_distinct(&x, &y, "layer_norm", weight.name);
    const std::int64_t d = dim();
    y.resize(x.shape());
    ops_of<Ctx>::rows(
        exec_of(ctx), detail::rows_of(x.shape()), d,
        detail::layer_norm_apply_fn<weight_of<Ctx>, activation_of<Ctx>>{
            x.data(), weights_of<Ctx>(weight), weights_of<Ctx>(bias), c.mean.data(), c.rstd.data(), y.data(), d});
  }

  // With xhat = (x - mean) * rstd and g = dy * weight:
  //   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
  //   weight.grad += sum over rows of dy * xhat, bias.grad += sum over rows of dy.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, "layer_norm", weight.name);
    check_params();
    detail::require_grad(weight, "layer_norm", weight.name, "weight");
    detail::require_grad(bias, "layer_norm", weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    detail::require_dy(dy, x.shape(), "layer_norm", weight.name);
    detail::require_distinct(&dy, &dx, "layer_norm", weight.name);
    const std::int64_t d = dim(), rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    using ops = ops_of<Ctx>;
    const auto exec = exec_of(ctx);
    ops::rows(exec, rows, d,
              detail::layer_norm_backward_fn<weight_of<Ctx>, activation_of<Ctx>>{
                  x.data(), dy.data(), weights_of<Ctx>(weight), c.mean.data(), c.rstd.data(), dx.data(), d});
    ops::add_column_sums(
        exec, rows, d,
        detail::layer_norm_weight_term<activation_of<Ctx>>{dy.data(), x.data(), c.mean.data(), c.rstd.data(), d},
        weight.grad());
    ops::add_column_sums(exec, rows, d, detail::matrix_term<activation_of<Ctx>>{dy.data(), d}, bias.grad());
  }

 private:
  void check_params() const {
    expects<config_error>(weight.shape.rank == 1 && bias.shape == weight.shape && eps > 0.0f, [&] {
      return strata::cat(detail::label("layer_norm", weight.name), ": weight ", weight.shape, ", bias ", bias.shape,
                         ", eps ", eps, "; expected weight and bias [dim] and eps > 0");
    });
    detail::require_bound(weight, "layer_norm", weight.name, "weight");
    detail::require_bound(bias, "layer_norm", weight.name, "bias");
  }
};

inline layer_norm make_layer_norm(int dim, float eps = 1e-5f) {
  strata::expects<config_error>(dim > 0, strata::cat("make_layer_norm(", dim, "): dim must be positive"));
  strata::expects<config_error>(eps > 0.0f, strata::cat("make_layer_norm: eps ", eps, " must be positive"));
  return layer_norm{param<float>(shape{dim}, init_spec::ones()), param<float>(shape{dim}, init_spec::zeros()), eps};
}

}  // namespace strata::nn
