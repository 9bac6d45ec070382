// nn::rms_norm: root-mean-square normalisation over the last dimension with a learned
// scale, y = x / sqrt(mean(x^2) + eps) * weight (Llama's and Qwen2's RMSNorm; no bias, no
// mean subtraction). Replicated under tensor parallelism.
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

namespace detail {

// One row: mean(x^2) in double, then y = (x rstd) weight, as transformers orders it; in
// float, y rounded once to the activation type T (transformers in 16 bits also rounds
// x rstd before the weight).
template <class W = float, class T = float>
struct rms_norm_forward_fn {
  const T* x;
  const W* w;
  T* y;
  float* rstd;
  std::int64_t d;
  double eps;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = x + r * d;
    const double ms = row.sum(d, [&](std::int64_t j) {
      const float xj = static_cast<float>(xr[j]);
      return static_cast<double>(xj) * xj;
    }) / static_cast<double>(d);
    const float rs = static_cast<float>(1.0 / std::sqrt(ms + eps));
    row.once([&] { rstd[r] = rs; });
    T* yr = y + r * d;
    row.for_each(
        d, [&](std::int64_t j) { yr[j] = round_to<T>((static_cast<float>(xr[j]) * rs) * static_cast<float>(w[j])); });
  }
};

// One row of dx = rstd (g - xhat mean(g xhat)) with g = dy w and xhat = x rstd, the mean
// summed in double; x, dy and dx of the activation type T, rstd float.
template <class W = float, class T = float>
struct rms_norm_backward_fn {
  const T *x, *dy;
  const W* w;
  const float* rstd;
  T* dx;
  std::int64_t d;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T *xr = x + r * d, *gr = dy + r * d;
    const float rs = rstd[r];
    const double sgx = row.sum(d, [&](std::int64_t j) {
      return static_cast<double>((static_cast<float>(gr[j]) * static_cast<float>(w[j])) *
                                 (static_cast<float>(xr[j]) * rs));
    });
    const float b = static_cast<float>(sgx / static_cast<double>(d));
    T* dxr = dx + r * d;
    row.for_each(d, [&](std::int64_t j) {
      dxr[j] = round_to<T>(
          rs * (static_cast<float>(gr[j]) * static_cast<float>(w[j]) - (static_cast<float>(xr[j]) * rs) * b));
    });
  }
};

// The weight gradient's term dy xhat (dy and x of the activation type T).
template <class T = float>
struct rms_norm_weight_term {
  const T *dy, *x;
  const float* rstd;
  std::int64_t d;
  STRATA_HOST_DEVICE float operator()(std::int64_t i, std::int64_t j) const {
    return static_cast<float>(dy[i * d + j]) * (static_cast<float>(x[i * d + j]) * rstd[i]);
  }
};

}  // namespace detail

struct rms_norm {
  param<float> weight;  // [dim], init ones
  float eps = 1e-6f;

  // rstd stays float whatever the activations: one number a row, where 16 bits would
  // cost the backward accuracy and save next to no memory.
  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
    tensor<float, Space> rstd;              // [rows]: 1 / sqrt(mean(x^2) + eps)
  };

  std::int64_t dim() const noexcept { return weight.shape[0]; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_params();
    const std::int64_t d = dim();
    detail::require_features(x, d, kind, weight.name, "weight");
    detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    y.resize(x.shape());
    c.rstd.resize(detail::vector_shape(rows));
    ops_of<Ctx>::rows(exec_of(ctx), rows, d,
                      detail::rms_norm_forward_fn<weight_of<Ctx>, activation_of<Ctx>>{
                          x.data(), weights_of<Ctx>(weight), y.data(), c.rstd.data(), d, static_cast<double>(eps)});
    c.x = &x;
  }

  // dx = rstd (g - xhat mean(g xhat)) with g = dy weight; weight.grad += sum over rows of
  // dy xhat.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    detail::require_grad(weight, kind, weight.name, "weight");
    const tensor_for<Ctx>& x = *c.x;
    detail::require_dy(dy, x.shape(), kind, weight.name);
    detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t d = dim(), rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    using ops = ops_of<Ctx>;
    const auto exec = exec_of(ctx);
    ops::rows(exec, rows, d,
              detail::rms_norm_backward_fn<weight_of<Ctx>, activation_of<Ctx>>{
                  x.data(), dy.data(), weights_of<Ctx>(weight), c.rstd.data(), dx.data(), d});
    ops::add_column_sums(exec, rows, d,
                         detail::rms_norm_weight_term<activation_of<Ctx>>{dy.data(), x.data(), c.rstd.data(), d},
                         weight.grad());
  }

 private:
  static constexpr const char* kind = "rms_norm";
  void check_params() const {
    expects<config_error>(weight.shape.rank == 1 && eps > 0.0f, [&] {
      return strata::cat(detail::label(kind, weight.name), ": weight ", weight.shape, ", eps ", eps,
                         "; expected weight [dim] and eps > 0");
    });
    detail::require_bound(weight, kind, weight.name, "weight");
  }
};

inline rms_norm make_rms_norm(int dim, float eps = 1e-6f) {
  expects<config_error>(dim > 0, [&] { return strata::cat("make_rms_norm(", dim, "): dim must be positive"); });
  expects<config_error>(eps > 0.0f, [&] { return strata::cat("make_rms_norm: eps ", eps, " must be positive"); });
  return rms_norm{param<float>(shape{dim}, init_spec::ones()), eps};
}

}  // namespace strata::nn
