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

// y = (x rs) w of one row, rounded once to T: forward's last pass, and forward_again's.
template <class Row, class W, class T>
STRATA_HOST_DEVICE STRATA_FORCEINLINE void rms_norm_scale_row(const Row& row, const T* xr, const W* w, float rs, T* yr,
                                                              std::int64_t d) {
  row.for_each(
      d, [&](std::int64_t j) { yr[j] = round_to<T>((static_cast<float>(xr[j]) * rs) * static_cast<float>(w[j])); });
}

// One row: mean(x^2) in double, then y = (x rstd) weight, as transformers orders it; in
// float, y rounded once to the activation type T (transformers in 16 bits also rounds
// x rstd before the weight). Residual: x += res first, in place, rounded once to T as
// add_into rounds it (each thread then reads back what it wrote: a GPU row's passes give
// a thread the same elements), so the pair costs one pass over the row, not two.
template <class W = float, class T = float, bool Residual = false>
struct rms_norm_forward_fn {
  const T* x;
  const W* w;
  T* y;
  float* rstd;
  std::int64_t d;
  double eps;
  const T* res = nullptr;  // Residual only
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = x + r * d;
    if constexpr (Residual) {
      T* hr = const_cast<T*>(xr);  // the caller's own tensor (rms_norm::forward_residual)
      const T* rr = res + r * d;
      row.for_each(d,
                   [&](std::int64_t j) { hr[j] = round_to<T>(static_cast<float>(hr[j]) + static_cast<float>(rr[j])); });
    }
    const double ms = row.sum(d, [&](std::int64_t j) {
      const float xj = static_cast<float>(xr[j]);
      return static_cast<double>(xj) * xj;
    }) / static_cast<double>(d);
    const float rs = static_cast<float>(1.0 / std::sqrt(ms + eps));
    row.once([&] { rstd[r] = rs; });
    rms_norm_scale_row(row, xr, w, rs, y + r * d, d);
  }
};

// One row of y again from the forward's rstd: the forward's last pass, the same bits (rs
// is the float forward stored), for a caller that does not keep y.
template <class W = float, class T = float>
struct rms_norm_apply_fn {
  const T* x;
  const W* w;
  const float* rstd;
  T* y;
  std::int64_t d;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    rms_norm_scale_row(row, x + r * d, w, rstd[r], y + r * d, d);
  }
};

// One row of dx = rstd (g - xhat mean(g xhat)) with g = dy w and xhat = x rstd, the mean
// summed in double; x, dy and dx of the activation type T, rstd float. Residual: dx +=
// res after, as add_into would (two roundings to T, as the two passes made).
template <class W = float, class T = float, bool Residual = false>
struct rms_norm_backward_fn {
  const T *x, *dy;
  const W* w;
  const float* rstd;
  T* dx;
  std::int64_t d;
  const T* res = nullptr;  // Residual only
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
      const T v = round_to<T>(
          rs * (static_cast<float>(gr[j]) * static_cast<float>(w[j]) - (static_cast<float>(xr[j]) * rs) * b));
      if constexpr (Residual)
        dxr[j] = round_to<T>(static_cast<float>(v) + static_cast<float>(res[r * d + j]));
      else
        dxr[j] = v;
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
    run_forward<false>(ctx, x, nullptr, y, c);
  }

  // h += res, then y = norm(h), in one kernel: a decoder's residual add before its next
  // norm (h = x + attn(norm1(x)); norm2(h)). h keeps the sum (the caller's next residual
  // and this norm's backward read it); the bits are those of add_into(h, res), forward.
  template <class Ctx>
  void forward_residual(Ctx& ctx, tensor_for<Ctx>& h, const tensor_for<Ctx>& res, tensor_for<Ctx>& y,
                        cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_same_shape(h, res, kind, weight.name, "the residual");
    detail::require_distinct(&res, &y, kind, weight.name);
    run_forward<true>(ctx, h, &res, y, c);
  }

  // y as the last forward made it, from its input and statistics in the cache: one pass,
  // the same bits, for a caller that keeps y only within a call (call_scratch.hpp).
  template <class Ctx>
  void forward_again(Ctx& ctx, tensor_for<Ctx>& y, const cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    const tensor_for<Ctx>& x = *c.x;
    detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t d = dim();
    y.resize(x.shape());
    ops_of<Ctx>::rows(exec_of(ctx), detail::rows_of(x.shape()), d,
                      detail::rms_norm_apply_fn<weight_of<Ctx>, activation_of<Ctx>>{x.data(), weights_of<Ctx>(weight),
                                                                                    c.rstd.data(), y.data(), d});
  }

  // dx = rstd (g - xhat mean(g xhat)) with g = dy weight; weight.grad += sum over rows of
  // dy xhat.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    run_backward<false>(ctx, dy, nullptr, dx, c);
  }

  // backward, then dx += res (the residual path's gradient) in the same kernel: the bits
  // of backward and add_into(dx, res).
  template <class Ctx>
  void backward_residual(Ctx& ctx, const tensor_for<Ctx>& dy, const tensor_for<Ctx>& res, tensor_for<Ctx>& dx,
                         cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_same_shape(dy, res, kind, weight.name, "the residual's gradient");
    detail::require_distinct(&res, &dx, kind, weight.name);
    run_backward<true>(ctx, dy, &res, dx, c);
  }

 private:
  static constexpr const char* kind = "rms_norm";

  template <bool Residual, class Ctx>
  void run_forward(Ctx& ctx, const tensor_for<Ctx>& x, const tensor_for<Ctx>* res, tensor_for<Ctx>& y,
                   cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_params();
    const std::int64_t d = dim();
    detail::require_features(x, d, kind, weight.name, "weight");
    detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    y.resize(x.shape());
    c.rstd.resize(detail::vector_shape(rows));
    ops_of<Ctx>::rows(exec_of(ctx), rows, d,
                      detail::rms_norm_forward_fn<weight_of<Ctx>, activation_of<Ctx>, Residual>{
                          x.data(), weights_of<Ctx>(weight), y.data(), c.rstd.data(), d, static_cast<double>(eps),
                          res ? res->data() : nullptr});
    c.x = &x;
  }

  template <bool Residual, class Ctx>
  void run_backward(Ctx& ctx, const tensor_for<Ctx>& dy, const tensor_for<Ctx>* res, tensor_for<Ctx>& dx,
                    cache<space_of<Ctx>, activation_of<Ctx>>& c) {
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
    ops::rows(
        exec, rows, d,
        detail::rms_norm_backward_fn<weight_of<Ctx>, activation_of<Ctx>, Residual>{
            x.data(), dy.data(), weights_of<Ctx>(weight), c.rstd.data(), dx.data(), d, res ? res->data() : nullptr});
    ops::add_column_sums(exec, rows, d,
                         detail::rms_norm_weight_term<activation_of<Ctx>>{dy.data(), x.data(), c.rstd.data(), d},
                         weight.grad());
  }
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
