// nn::linear: y = x W^T + b over the last dimension (torch.nn.Linear), both products done
// by the space's BLAS (cblas_sgemm on the host, cuBLAS on a GPU), gradients accumulated
// into the params.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/blas.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct linear {
  param<float> weight;  // [out, in]
  param<float> bias;    // [out]; shape [0] (no elements) for a linear without bias

  template <class Space = host>
  struct cache {
    // The input of the forward: the trainer keeps every layer's input alive until its
    // backward, so a pointer is enough (and costs no copy).
    const tensor<float, Space>* x = nullptr;
  };

  std::int64_t in_features() const noexcept { return weight.shape[1]; }
  std::int64_t out_features() const noexcept { return weight.shape[0]; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  // x [..., in] -> y [..., out]. x and y must be different tensors.
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    check_params();
    const std::int64_t in = in_features(), out = out_features();
    nn::detail::require_features(x, in, "linear", weight.name, "weight");
    nn::detail::require_distinct(&x, &y, "linear", weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    y.resize(nn::detail::with_last(x.shape(), out));
    // Broadcasting b into y and letting the GEMM add onto it (beta = 1) saves a pass.
    const float beta = has_bias() ? 1.0f : 0.0f;
    using nn::detail::transpose;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      if (has_bias()) {
        const float* b = bias.data();
        float* yp = y.data();
        nn::detail::for_rows(rows, out, [&](std::int64_t r) { std::memcpy(yp + r * out, b, out * sizeof(float)); });
      }
      nn::detail::gemm(host{}, transpose::no, transpose::yes, rows, out, in, 1.0f, x.data(), in, weight.data(), in,
                       beta, y.data(), out);
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      if (has_bias()) ops::broadcast_rows(ctx.exec(), rows, out, bias.data(), y.data());
      ops::gemm(ctx.exec(), transpose::no, transpose::yes, rows, out, in, 1.0f, x.data(), in, weight.data(), in,
                beta, y.data(), out);
    }
    c.x = &x;
  }

  // dx = dy W; weight.grad += dy^T x; bias.grad += column sums of dy.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.x, "linear", weight.name);
    check_params();
    nn::detail::require_grad(weight, "linear", weight.name, "weight");
    nn::detail::require_grad(bias, "linear", weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t in = in_features(), out = out_features();
    nn::detail::require_dy(dy, nn::detail::with_last(x.shape(), out), "linear", weight.name);
    nn::detail::require_distinct(&dy, &dx, "linear", weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
    using nn::detail::transpose;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      nn::detail::gemm(host{}, transpose::no, transpose::no, rows, in, out, 1.0f, dy.data(), out, weight.data(), in,
                       0.0f, dx.data(), in);
      nn::detail::gemm(host{}, transpose::yes, transpose::no, out, in, rows, 1.0f, dy.data(), out, x.data(), in,
                       1.0f, weight.grad(), in);
      if (has_bias()) {
        const float* g = dy.data();
        nn::detail::add_column_sums(rows, out, bias.grad(), [g, out](std::int64_t i, std::int64_t j) {
          return g[i * out + j];
        });
      }
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      ops::gemm(ctx.exec(), transpose::no, transpose::no, rows, in, out, 1.0f, dy.data(), out, weight.data(), in,
                0.0f, dx.data(), in);
      ops::gemm(ctx.exec(), transpose::yes, transpose::no, out, in, rows, 1.0f, dy.data(), out, x.data(), in, 1.0f,
                weight.grad(), in);
      if (has_bias()) ops::add_column_sums(ctx.exec(), rows, out, dy.data(), bias.grad());
    }
  }

 private:
  void check_params() const {
    if (weight.shape.rank != 2 || (has_bias() && bias.numel() != static_cast<std::size_t>(weight.shape[0])))
      [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label("linear", weight.name), ": weight has shape ",
                                           weight.shape, " and bias ", bias.shape,
                                           "; expected [out, in] and [out] (or [0] without bias)"),
                       std::source_location::current());
    nn::detail::require_bound(weight, "linear", weight.name, "weight");
    nn::detail::require_bound(bias, "linear", weight.name, "bias");
  }
};

// A linear layer initialised like torch.nn.Linear's weight (uniform in +-1/sqrt(in)),
// with a zero bias, or with no bias at all (an empty param, which takes no space in the
// flat layout).
inline linear make_linear(int in_features, int out_features, bool bias = true) {
  strata::expects<config_error>(in_features > 0 && out_features > 0,
                                strata::detail::cat("make_linear(", in_features, ", ", out_features,
                                                    "): feature counts must be positive"));
  linear l;
  l.weight = param<float>(shape{out_features, in_features},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.bias = param<float>(bias ? shape{out_features} : shape{0}, init_spec::zeros());
  return l;
}

}  // namespace strata::nn
