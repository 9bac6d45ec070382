// nn::causal_self_attention: multi-head self-attention where position i attends to
// positions <= i, on [B, S, D] activations; with T tensor-parallel ranks each holds H/T heads.
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../model/param.hpp"
#include "../space/call_scratch.hpp"
#include "../space/tensor.hpp"
#include "detail/attention_core.hpp"
#include "detail/checks.hpp"
#include "tp/column_parallel_linear.hpp"
#include "tp/row_parallel_linear.hpp"

namespace strata::nn {

// The q/k/v projection is one column-parallel linear whose full [3D, D] weight groups its
// rows by head (q_h, k_h, v_h for h = 0..H-1, Megatron's layout), so a contiguous slice of
// rows is a set of whole heads and each rank attends over its own heads with no
// communication. The output projection is row-parallel: its all-reduce sums the heads.
// With T = 1 this is plain attention (the projections communicate nothing).
struct causal_self_attention {
  column_parallel_linear qkv;  // [3D/T, D] (+ bias [3D/T])
  row_parallel_linear proj;    // [D, D/T] (+ bias [D], replicated)
  int heads = 0;               // all heads, over every rank

  // What one call uses and leaves (call_scratch.hpp): backward's gradients, and a GPU's
  // scratch for one step of the walk's pairs, [inner, S, S] (attention_core.hpp): float
  // scores (before the softmax, 16-bit Act only; in backward their gradient, which a float
  // Act turns into the scores' gradient in place), and with 16-bit Act the scores'
  // gradient as Act, the GEMMs' operand.
  template <class Space = host, class Act = float>
  struct scratch {
    tensor<Act, Space> d_attended, d_qkv;
    tensor<float, Space> d_scores;
    tensor<Act, Space> d_scores_act;
  };
  template <class Space = host, class Act = float>
  struct cache {
    column_parallel_linear::cache<Space, Act> qkv;
    row_parallel_linear::cache<Space, Act> proj;
    tensor<Act, Space> qkv_out;  // [B, S, 3 D/T]: per head q, k, v side by side
    // What backward needs of the softmax (attention_core.hpp): each row's log-sum-exp
    // [B, H/T, S] in float (the host; a GPU's fused attention), or the probabilities
    // [B, H/T, S, S] as Act (a GPU's unfused GEMMs).
    detail::attention_saved<Space, Act> saved;
    tensor<Act, Space> attended;  // [B, S, D/T]: heads' outputs, the projection's input
    call_scratch<scratch<Space, Act>> work;
  };

  int local_heads() const noexcept { return qkv.tp_size > 0 ? heads / qkv.tp_size : 0; }
  std::int64_t dim() const noexcept { return qkv.in_features(); }
  std::int64_t head_dim() const noexcept { return heads > 0 ? dim() / heads : 0; }

  // x [B, S, D] -> y [B, S, D].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_input(x);
    detail::require_distinct(&x, &y, kind, qkv.weight.name);
    qkv.forward(ctx, x, c.qkv_out, c.qkv);
    const detail::attention_layout l = layout(x);
    c.attended.resize(shape{l.B, l.S, l.ldo()});
    const activation_of<Ctx>* q = c.qkv_out.data();
    detail::attention_forward(ctx, l, q, q + l.hd, q + 2 * l.hd, c.saved, c.attended.data(),
                              &scratch_of(ctx, c.work).d_scores);
    proj.forward(ctx, c.attended, y, c.proj);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.qkv.x, kind, qkv.weight.name);
    detail::require_distinct(&dy, &dx, kind, qkv.weight.name);
    auto& w = scratch_of(ctx, c.work);
    proj.backward(ctx, dy, w.d_attended, c.proj);
    const detail::attention_layout l = layout(*c.qkv.x);
    w.d_qkv.resize(c.qkv_out.shape());
    const activation_of<Ctx>* q = c.qkv_out.data();
    activation_of<Ctx>* dq = w.d_qkv.data();
    detail::attention_backward(ctx, l, q, q + l.hd, q + 2 * l.hd, c.saved, c.attended.data(), w.d_attended.data(), dq,
                               dq + l.hd, dq + 2 * l.hd, w.d_scores, &w.d_scores_act);
    qkv.backward(ctx, w.d_qkv, dx, c.qkv);
  }

 private:
  static constexpr const char* kind = "attention";

  // Per head q, k, v side by side in each row of qkv_out: every head its own key/value.
  template <class E, class Space>
  detail::attention_layout layout(const tensor<E, Space>& x) const {
    const std::int64_t H = local_heads(), hd = head_dim();
    return {x.dim(0), x.dim(1), H, hd, 1, 3 * H * hd, 3 * hd, 3 * H * hd, 3 * hd};
  }

  template <class E, class Space>
  void check_input(const tensor<E, Space>& x) const {
    const std::int64_t d = dim();
    expects<config_error>(heads > 0 && d % heads == 0 && qkv.tp_size > 0 && heads % qkv.tp_size == 0 &&
                              qkv.local_out_features() == 3 * d / qkv.tp_size &&
                              proj.local_in_features() == d / qkv.tp_size && proj.out_features() == d,
                          [&] {
                            return strata::cat(detail::label(kind, qkv.weight.name), ": ", heads,
                                               " heads with qkv weight ", qkv.weight.shape, " and proj weight ",
                                               proj.weight.shape, " over ", qkv.tp_size,
                                               " tensor-parallel ranks do not fit together (build it with "
                                               "make_causal_self_attention)");
                          });
    expects<config_error>(x.shape().rank == 3 && x.dim(2) == d, [&] {
      return strata::cat(detail::label(kind, qkv.weight.name), ": input has shape ", x.shape(),
                         "; expected [batch, sequence, ", d, "]");
    });
  }
};

// Attention over `dim` features in `heads` heads, heads split over tp_size ranks. Weights
// start like torch.nn.Linear's (uniform in +-1/sqrt(dim)), biases at zero.
inline causal_self_attention make_causal_self_attention(int dim, int heads, int tp_rank = 0, int tp_size = 1,
                                                        bool bias = true) {
  strata::expects<config_error>(dim > 0 && heads > 0,
                                strata::cat("attention: dim ", dim, " and heads ", heads, " must be positive"));
  strata::expects<config_error>(dim % heads == 0,
                                strata::cat("attention: dim ", dim, " does not split into ", heads, " heads"));
  (void)make_tp_slice("attention", heads, "heads", tp_rank, tp_size);
  return causal_self_attention{make_column_parallel_linear(dim, 3 * dim, tp_rank, tp_size, bias, false),
                               make_row_parallel_linear(dim, dim, tp_rank, tp_size, bias), heads};
}

}  // namespace strata::nn
