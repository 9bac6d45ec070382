// nn::column_parallel_linear: y = x W^T + b with W split by output rows over the ranks of
// ctx.tp() (Megatron's ColumnParallelLinear); with tp_size 1 it is nn::linear.
#pragma once
#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "../../core/config.hpp"
#include "../../model/param.hpp"
#include "../../space/tensor.hpp"
#include "../detail/checks.hpp"
#include "../detail/linear_ops.hpp"
#include "../gelu.hpp"
#include "context.hpp"

namespace strata::nn {

namespace detail {
// blocks[p][rows][cols] (what all_gather returns) -> y[rows][p cols]: row r of y is the
// ranks' rows r side by side. Copies of T (float or 16-bit activations).
template <class T = float>
struct concat_blocks_fn {
  const T* blocks;
  T* y;
  std::int64_t p, rows, cols;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    for (std::int64_t k = 0; k < p; ++k) {
      const T* src = blocks + (k * rows + r) * cols;
      T* dst = y + (r * p + k) * cols;
      row.for_each(cols, [&](std::int64_t j) { dst[j] = src[j]; });
    }
  }
};
// Columns [k cols, (k + 1) cols) of y[rows][p cols] -> out[rows][cols].
template <class T = float>
struct take_block_fn {
  const T* y;
  T* out;
  std::int64_t p, k, cols;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* yr = y + r * p * cols + k * cols;
    T* o = out + r * cols;
    row.for_each(cols, [&](std::int64_t j) { o[j] = yr[j]; });
  }
};
}  // namespace detail

struct column_parallel_linear;
template <class Ctx>
struct column_grad;
template <class Ctx>
void shared_input_backward(Ctx& ctx, std::initializer_list<column_grad<Ctx>> parts, tensor_for<Ctx>& dx);

// Rank r holds rows [r out/T, (r+1) out/T) of the full [out, in] weight and the same
// slice of the bias. The input is whole on every rank; the output is this rank's slice of
// the features, or, with gather_output, all of them. Backward all-reduces dx (Megatron's
// "f"), overlapped with the weight-grad GEMM. Activations, their gradients and what the
// collectives move are the context's activation type (16 bits in a mixed GPU trainer).
struct column_parallel_linear {
  param<float> weight;  // [out/T, in]
  param<float> bias;    // [out/T], or [0] without bias
  bool gather_output = false;
  int tp_rank = 0, tp_size = 1;

  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
    tensor<Act, Space> local;               // with gather_output: this rank's slice of y
    tensor<Act, Space> gathered;            // [T, rows, out/T] as all_gather leaves it
    tensor<Act, Space> dy_local;            // with gather_output: this rank's slice of dy
  };

  std::int64_t in_features() const noexcept { return weight.shape[1]; }
  std::int64_t local_out_features() const noexcept { return weight.shape[0]; }
  std::int64_t out_features() const noexcept { return weight.shape[0] * tp_size; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    const std::int64_t in = in_features(), out_l = local_out_features();
    const std::int64_t rows = checked_rows(x, y);
    const weight_of<Ctx>* w = weights_of<Ctx>(weight);
    const weight_of<Ctx>* b = has_bias() ? weights_of<Ctx>(bias) : nullptr;
    if (dist && gather_output) {
      c.local.resize(detail::with_last(x.shape(), out_l));
      detail::linear_forward(ctx, x.data(), rows, in, w, out_l, b, c.local.data());
      c.gathered.resize(detail::vector_shape(rows * out_l * tp_size));
      detail::tp_all_gather(ctx, c.local.span(), c.gathered.span());
      y.resize(detail::with_last(x.shape(), out_features()));
      ops_of<Ctx>::rows(
          exec_of(ctx), rows, out_l * tp_size,
          detail::concat_blocks_fn<activation_of<Ctx>>{c.gathered.data(), y.data(), tp_size, rows, out_l});
    } else {
      y.resize(detail::with_last(x.shape(), out_l));
      detail::linear_forward(ctx, x.data(), rows, in, w, out_l, b, y.data());
    }
    c.x = &x;
  }

  // forward, then g = act(y) with y kept as act's input (ca points at it, as act.forward
  // leaves it): GPT-2's fc1 and its GELU. Where the space fuses them (cuBLASLt's bias-GELU
  // epilogue on a GPU: 16-bit activations, the tanh form, a bias, the output not
  // gathered) one GEMM writes y and g; else forward and act.forward, the same results up
  // to where GELU's input is rounded.
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>, activation_of<Ctx>>& c,
               const gelu& act, tensor_for<Ctx>& g, gelu::cache<space_of<Ctx>, activation_of<Ctx>>& ca) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    if (has_bias() && !(dist && gather_output) && act.approximate == gelu_approximation::tanh) {
      detail::require_distinct(&y, &g, "gelu", std::string());
      detail::require_distinct(&x, &g, kind, weight.name);
      const std::int64_t rows = checked_rows(x, y);
      y.resize(detail::with_last(x.shape(), local_out_features()));
      g.resize(y.shape());
      if (detail::linear_gelu_forward(ctx, x.data(), rows, in_features(), weights_of<Ctx>(weight), local_out_features(),
                                      weights_of<Ctx>(bias), y.data(), g.data())) {
        c.x = &x;
        ca.x = &y;
        return;
      }
    }
    forward(ctx, x, y, c);
    act.forward(ctx, y, g, ca);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    shared_input_backward(ctx, {{*this, dy, c}}, dx);
  }

  // backward's two halves, for linears that read one input (shared_input_backward): this
  // rank's part of the input gradient, into dx or, with accumulate, added onto it (dx
  // then holds another linear's, of x's shape); true where ctx.tp() must sum it. Then the
  // weight's and bias's gradients from the same dy.
  template <class Ctx>
  bool input_grad(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c,
                  bool accumulate = false) {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    detail::require_grad(weight, kind, weight.name, "weight");
    detail::require_grad(bias, kind, weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t out_l = local_out_features();
    const bool gathered = dist && gather_output;
    detail::require_dy(dy, detail::with_last(x.shape(), gathered ? out_features() : out_l), kind, weight.name);
    detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape());
    if (gathered) {
      c.dy_local.resize(detail::with_last(x.shape(), out_l));
      ops_of<Ctx>::rows(
          exec_of(ctx), rows, out_l,
          detail::take_block_fn<activation_of<Ctx>>{dy.data(), c.dy_local.data(), tp_size, tp_rank, out_l});
    }
    if (accumulate)
      expects<config_error>(dx.shape() == x.shape(), [&] {
        return strata::cat(detail::label(kind, weight.name), ": adds its input gradient onto one of shape ", dx.shape(),
                           " but its input has shape ", x.shape(), "; linears that share an input share its shape");
      });
    else
      dx.resize(x.shape());
    detail::linear_input_grad(ctx, local_dy(dy, c), rows, out_l, weights_of<Ctx>(weight), in_features(), dx.data(),
                              accumulate);
    return dist;
  }
  template <class Ctx>
  void param_grads(Ctx& ctx, const tensor_for<Ctx>& dy, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    const tensor_for<Ctx>& x = *c.x;
    detail::linear_param_grads(ctx, local_dy(dy, c), x.data(), detail::rows_of(x.shape()), local_out_features(),
                               in_features(), weight.grad(), has_bias() ? bias.grad() : nullptr);
  }

 private:
  static constexpr const char* kind = "column_parallel_linear";
  // dy's columns of this rank: dy itself, or with a gathered output the block that
  // input_grad took into the cache.
  template <class T, class Space>
  const T* local_dy(const tensor<T, Space>& dy, const cache<Space, T>& c) const {
    return gather_output && tp_size > 1 ? c.dy_local.data() : dy.data();
  }
  void check_params() const {
    expects<config_error>(
        weight.shape.rank == 2 && (!has_bias() || bias.numel() == static_cast<std::size_t>(weight.shape[0])), [&] {
          return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape, " and bias ",
                             bias.shape, "; expected [out/T, in] and [out/T] (or [0] without bias)");
        });
    detail::require_bound(weight, kind, weight.name, "weight");
    detail::require_bound(bias, kind, weight.name, "bias");
  }
  // The params, x's features and y apart from x checked: x's rows.
  template <class T, class Space>
  std::int64_t checked_rows(const tensor<T, Space>& x, const tensor<T, Space>& y) const {
    check_params();
    detail::require_features(x, in_features(), kind, weight.name, "weight");
    detail::require_distinct(&x, &y, kind, weight.name);
    return detail::rows_of(x.shape());
  }
};

// One column-parallel linear's part in shared_input_backward: the linear, the gradient of
// its output and its cache.
template <class Ctx>
struct column_grad {
  column_parallel_linear& layer;
  const tensor_for<Ctx>& dy;
  column_parallel_linear::cache<space_of<Ctx>, activation_of<Ctx>>& c;
};

// The backward of column-parallel linears that read one input x (attention's q, k and v;
// the MLP's gate and up): dx = the sum of their input gradients, each GEMM adding onto
// the last (beta = 1, no separate add and no tensor per linear), then one all-reduce of
// the sum over ctx.tp() where each linear alone would all-reduce its own (Megatron fuses
// such linears into one for the same reason), running while the weight-grad GEMMs run.
template <class Ctx>
void shared_input_backward(Ctx& ctx, std::initializer_list<column_grad<Ctx>> parts, tensor_for<Ctx>& dx) {
  expects<config_error>(parts.size() > 0, "shared_input_backward: no linears given");
  const column_grad<Ctx>& first = *parts.begin();
  bool dist = false, accumulate = false;
  for (const column_grad<Ctx>& p : parts) {
    expects<config_error>(p.c.x == first.c.x && p.layer.tp_size == first.layer.tp_size, [&] {
      return strata::cat("shared_input_backward: '", p.layer.weight.name, "' and '", first.layer.weight.name,
                         "' must have read the same input over the same tensor-parallel ranks (", p.layer.tp_size,
                         " and ", first.layer.tp_size, ")");
    });
    dist = p.layer.input_grad(ctx, p.dy, dx, p.c, accumulate);
    accumulate = true;
  }
  // Each rank's dx is the contribution of its output slices: the sum is the full dx. The
  // all-reduce runs on the communicator's lane (NCCL: its stream) while the weight-grad
  // GEMMs run here (on the compute stream). It sums in the activation type, as Megatron
  // all-reduces bf16 input gradients: half the traffic of float partials and no float
  // buffer, for one rounding per rank added.
  request pending = dist ? detail::tp_all_reduce_async(ctx, dx.span()) : request{};
  for (const column_grad<Ctx>& p : parts) p.layer.param_grads(ctx, p.dy, p.c);
  pending.wait();
}

// Checks divisibility and declares each param's slice of the full tensor; the weight
// starts like torch.nn.Linear's (uniform in +-1/sqrt(in)), drawn over the full weight.
inline column_parallel_linear make_column_parallel_linear(int in_features, int out_features, int tp_rank, int tp_size,
                                                          bool bias = true, bool gather_output = false) {
  expects<config_error>(in_features > 0, [&] {
    return strata::cat("column_parallel_linear: ", in_features, " input features (must be positive)");
  });
  const auto s = make_tp_slice("column_parallel_linear", out_features, "output features", tp_rank, tp_size);
  column_parallel_linear l;
  l.weight = param<float>(shape{s.per_rank, in_features},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.weight.shard_of(shape{out_features, in_features}, 0, s.begin());
  l.bias = param<float>(bias ? shape{s.per_rank} : shape{0}, init_spec::zeros());
  if (bias) l.bias.shard_of(shape{out_features}, 0, s.begin());
  l.gather_output = gather_output;
  l.tp_rank = tp_rank;
  l.tp_size = tp_size;
  return l;
}

}  // namespace strata::nn
