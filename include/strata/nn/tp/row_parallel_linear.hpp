// nn::row_parallel_linear: y = all_reduce(x_r W_r^T) + b with W split by input columns over
// the ranks of ctx.tp() (Megatron's RowParallelLinear); with tp_size 1 it is nn::linear.
#pragma once
#include <cmath>
#include <cstdint>

#include "../../model/param.hpp"
#include "../../space/tensor.hpp"
#include "../detail/checks.hpp"
#include "../detail/linear_ops.hpp"
#include "../gelu.hpp"
#include "context.hpp"

namespace strata::nn {

// Rank r holds columns [r in/T, (r+1) in/T) of the full [out, in] weight and takes the
// matching slice of the features as input (what a column_parallel_linear without
// gather_output produces). The bias is whole on every rank and added once, after the
// reduction. Backward is local. Activations and their gradients are the context's
// activation type (16 bits in a mixed GPU trainer).
struct row_parallel_linear {
  param<float> weight;  // [out, in/T]
  param<float> bias;    // [out] (replicated), or [0] without bias
  int tp_rank = 0, tp_size = 1;

  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input slice, kept alive by the trainer until backward
  };

  std::int64_t local_in_features() const noexcept { return weight.shape[1]; }
  std::int64_t in_features() const noexcept { return weight.shape[1] * tp_size; }
  std::int64_t out_features() const noexcept { return weight.shape[0]; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    const std::int64_t in_l = local_in_features(), out = out_features();
    detail::require_features(x, in_l, kind, weight.name, "weight slice");
    detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    y.resize(detail::with_last(x.shape(), out));
    const weight_of<Ctx>* b = has_bias() ? weights_of<Ctx>(bias) : nullptr;
    detail::linear_forward(ctx, x.data(), rows, in_l, weights_of<Ctx>(weight), out, dist ? nullptr : b, y.data());
    if (dist) {
      // The next layer needs the whole sum: nothing can overlap this reduction. Partial
      // products are summed in the activation type, as Megatron all-reduces bf16
      // activations: half the traffic of float partials and no float buffer, for one
      // rounding per rank added.
      detail::tp_all_reduce(ctx, y.span());
      if (b) detail::add_rows(ctx, rows, out, y.data(), b, y.data());
    }
    c.x = &x;
  }

  // dx (this rank's slice) = dy W_r; W_r.grad += dy^T x_r; bias.grad += column sums of dy,
  // the same full bias gradient on every rank.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    backward_through(ctx, dy, dx, c, nullptr, nullptr);
  }

  // backward with dx carried on through the GELU whose output was this layer's input:
  // dx = gelu'(u) (dy W_r), the gradient of GELU's input u (ca, as act.forward left it).
  // GPT-2's fc2 and the GELU before it. Where the space fuses GELU's gradient into the
  // GEMM (cuBLASLt on a GPU: 16-bit activations, the tanh form) that is one GEMM; else
  // dy W_r and act.backward_at in place, the bits of backward then act.backward.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c,
                const gelu& act, const gelu::cache<space_of<Ctx>, activation_of<Ctx>>& ca) {
    expects<config_error>(ca.x != nullptr, [&] {
      return strata::cat(detail::label(kind, weight.name),
                         " backward through gelu: gelu's cache was filled by no forward (run gelu's forward on this "
                         "layer's input first)");
    });
    backward_through(ctx, dy, dx, c, &act, ca.x);
  }

 private:
  static constexpr const char* kind = "row_parallel_linear";

  // backward, through act at u where act is given.
  template <class Ctx>
  void backward_through(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                        cache<space_of<Ctx>, activation_of<Ctx>>& c, const gelu* act, const tensor_for<Ctx>* u) {
    (void)detail::tp_active(ctx, tp_size, kind, weight.name);
    detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    detail::require_grad(weight, kind, weight.name, "weight");
    detail::require_grad(bias, kind, weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t in_l = local_in_features(), out = out_features();
    detail::require_dy(dy, detail::with_last(x.shape(), out), kind, weight.name);
    detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    if (act) {
      expects<config_error>(u->shape() == x.shape(), [&] {
        return strata::cat(detail::label(kind, weight.name), " backward through gelu: gelu's input has shape ",
                           u->shape(), ", this layer's input ", x.shape(), "; they must match");
      });
      // dx is written where u is still read.
      detail::require_distinct(u, &dx, kind, weight.name);
    }
    const bool fused =
        act && act->approximate == gelu_approximation::tanh &&
        detail::linear_input_grad_dgelu(ctx, dy.data(), rows, out, weights_of<Ctx>(weight), in_l, u->data(), dx.data());
    if (!fused) {
      detail::linear_input_grad(ctx, dy.data(), rows, out, weights_of<Ctx>(weight), in_l, dx.data());
      if (act) act->backward_at(ctx, *u, dx);
    }
    detail::linear_param_grads(ctx, dy.data(), x.data(), rows, out, in_l, weight.grad(),
                               has_bias() ? bias.grad() : nullptr);
  }
  void check_params() const {
    expects<config_error>(
        weight.shape.rank == 2 && (!has_bias() || bias.numel() == static_cast<std::size_t>(weight.shape[0])), [&] {
          return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape, " and bias ",
                             bias.shape, "; expected [out, in/T] and [out] (or [0] without bias)");
        });
    detail::require_bound(weight, kind, weight.name, "weight");
    detail::require_bound(bias, kind, weight.name, "bias");
  }
};

inline row_parallel_linear make_row_parallel_linear(int in_features, int out_features, int tp_rank, int tp_size,
                                                    bool bias = true) {
  expects<config_error>(out_features > 0, [&] {
    return strata::cat("row_parallel_linear: ", out_features, " output features (must be positive)");
  });
  const auto s = make_tp_slice("row_parallel_linear", in_features, "input features", tp_rank, tp_size);
  row_parallel_linear l;
  l.weight = param<float>(shape{out_features, s.per_rank},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.weight.shard_of(shape{out_features, in_features}, 1, s.begin());
  l.bias = param<float>(bias ? shape{out_features} : shape{0}, init_spec::zeros());
  l.tp_rank = tp_rank;
  l.tp_size = tp_size;
  return l;
}

}  // namespace strata::nn
