// nn::linear: y = x W^T + b over the last dimension (torch.nn.Linear), both products done
// by the space's BLAS (cblas_sgemm on the host, cuBLAS on a GPU), gradients accumulated
// into the params.
#pragma once
#include <cmath>
#include <cstdint>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "detail/linear_ops.hpp"

namespace strata::nn {

struct linear {
  param<float> weight;  // [out, in]
  param<float> bias;    // [out]; shape [0] (no elements) for a linear without bias

  template <class Space = host, class Act = float>
  struct cache {
    // The input of the forward: the trainer keeps every layer's input alive until its
    // backward, so a pointer is enough (and costs no copy).
    const tensor<Act, Space>* x = nullptr;
  };

  std::int64_t in_features() const noexcept { return weight.shape[1]; }
  std::int64_t out_features() const noexcept { return weight.shape[0]; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  // x [..., in] -> y [..., out]. x and y must be different tensors.
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_params();
    const std::int64_t in = in_features(), out = out_features();
    detail::require_features(x, in, "linear", weight.name, "weight");
    detail::require_distinct(&x, &y, "linear", weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    y.resize(detail::with_last(x.shape(), out));
    detail::linear_forward(ctx, x.data(), rows, in, weights_of<Ctx>(weight), out,
                           has_bias() ? weights_of<Ctx>(bias) : nullptr, y.data());
    c.x = &x;
  }

  // dx = dy W; weight.grad += dy^T x; bias.grad += column sums of dy.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, "linear", weight.name);
    check_params();
    detail::require_grad(weight, "linear", weight.name, "weight");
    detail::require_grad(bias, "linear", weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t in = in_features(), out = out_features();
    detail::require_dy(dy, detail::with_last(x.shape(), out), "linear", weight.name);
    detail::require_distinct(&dy, &dx, "linear", weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    detail::linear_input_grad(ctx, dy.data(), rows, out, weights_of<Ctx>(weight), in, dx.data());
    detail::linear_param_grads(ctx, dy.data(), x.data(), rows, out, in, weight.grad(),
                               has_bias() ? bias.grad() : nullptr);
  }

 private:
  void check_params() const {
    expects<config_error>(
        weight.shape.rank == 2 && (!has_bias() || bias.numel() == static_cast<std::size_t>(weight.shape[0])), [&] {
          return strata::cat(detail::label("linear", weight.name), ": weight has shape ", weight.shape, " and bias ",
                             bias.shape, "; expected [out, in] and [out] (or [0] without bias)");
        });
    detail::require_bound(weight, "linear", weight.name, "weight");
    detail::require_bound(bias, "linear", weight.name, "bias");
  }
};

// A linear layer initialised like torch.nn.Linear's weight (uniform in +-1/sqrt(in)),
// with a zero bias, or with no bias at all (an empty param, which takes no space in the
// flat layout).
inline linear make_linear(int in_features, int out_features, bool bias = true) {
  strata::expects<config_error>(
      in_features > 0 && out_features > 0,
      strata::cat("make_linear(", in_features, ", ", out_features, "): feature counts must be positive"));
  linear l;
  l.weight = param<float>(shape{out_features, in_features},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.bias = param<float>(bias ? shape{out_features} : shape{0}, init_spec::zeros());
  return l;
}

}  // namespace strata::nn
