// nn::causal_self_attention: multi-head self-attention where position i attends to
// positions <= i, on [B, S, D] activations; with T tensor-parallel ranks each holds H/T heads.
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "tp/column_parallel_linear.hpp"
#include "tp/row_parallel_linear.hpp"

namespace strata::nn {

namespace detail {

// Row i of each [S, S] score matrix in place: softmax over columns 0..i (max, float exps
// summed in double, times the float inverse), zeros after. Row r is row r % S of matrix
// r / S, which starts at p + (r / S) stride.
struct causal_softmax_fn {
  float* p;
  std::int64_t S, stride;
  template <class Row>
  STRATA_HOST_DEVICE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t i = r % S;
    float* x = p + (r / S) * stride + i * S;
    // Subtracting the max of what row i sees keeps every exp in (0, 1].
    const float m = row.max(i + 1, [&](std::int64_t j) { return x[j]; });
    row.for_each(i + 1, [&](std::int64_t j) { x[j] = std::exp(x[j] - m); });
    const double sum = row.sum(i + 1, [&](std::int64_t j) { return static_cast<double>(x[j]); });
    const float inv = static_cast<float>(1.0 / sum);
    row.for_each(S, [&](std::int64_t j) { x[j] = j <= i ? x[j] * inv : 0.0f; });
  }
};

// d = P (d - rowsum(P d)) on row i's columns 0..i, zeros after, in place in d. Products
// of two floats are exact in double, so only the order of the sum matters.
struct causal_softmax_backward_fn {
  const float* p;
  float* d;
  std::int64_t S, p_stride, d_stride;
  template <class Row>
  STRATA_HOST_DEVICE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t i = r % S;
    const float* pr = p + (r / S) * p_stride + i * S;
    float* dr = d + (r / S) * d_stride + i * S;
    const double dot = row.sum(i + 1, [&](std::int64_t j) { return static_cast<double>(pr[j]) * dr[j]; });
    const float fdot = static_cast<float>(dot);
    row.for_each(S, [&](std::int64_t j) { dr[j] = j <= i ? pr[j] * (dr[j] - fdot) : 0.0f; });
  }
};

// How attention walks its (batch, head) pairs: `outer` steps, each one strided batched
// GEMM over `inner` pairs. The pairs' offsets are b S ld + h 3 hd in qkv_out, (b H + h) S S
// in probs and b S ldo + h hd in attended, so heads and batch rows each have a constant
// stride, but not both together: a space that batches takes the larger of the two as
// inner; one that does not takes the pairs one by one (inner 1).
struct attention_walk {
  std::int64_t B, S, H, hd, outer, inner;
  bool heads_inner, single;
  attention_walk(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t d, bool batched)
      : B(b), S(s), H(h), hd(d), heads_inner(h >= b), single(!batched) {
    outer = single ? B * H : heads_inner ? B : H;
    inner = single ? 1 : heads_inner ? H : B;
  }
  std::int64_t ld() const { return 3 * H * hd; }
  std::int64_t ldo() const { return H * hd; }
  // The first pair of step o.
  std::int64_t b0(std::int64_t o) const { return single ? o / H : heads_inner ? o : 0; }
  std::int64_t h0(std::int64_t o) const { return single ? o % H : heads_inner ? 0 : o; }
  std::int64_t qkv_offset(std::int64_t o) const { return b0(o) * S * ld() + h0(o) * 3 * hd; }
  std::int64_t probs_offset(std::int64_t o) const { return (b0(o) * H + h0(o)) * S * S; }
  std::int64_t out_offset(std::int64_t o) const { return b0(o) * S * ldo() + h0(o) * hd; }
  // From one pair of a step to the next.
  std::int64_t qkv_stride() const { return heads_inner ? 3 * hd : S * ld(); }
  std::int64_t probs_stride() const { return heads_inner ? S * S : H * S * S; }
  std::int64_t out_stride() const { return heads_inner ? hd : S * ldo(); }
};

}  // namespace detail

// The q/k/v projection is one column-parallel linear whose full [3D, D] weight groups its
// rows by head (q_h, k_h, v_h for h = 0..H-1, Megatron's layout), so a contiguous slice of
// rows is a set of whole heads and each rank attends over its own heads with no
// communication. The output projection is row-parallel: its all-reduce sums the heads.
// With T = 1 this is plain attention (the projections communicate nothing).
struct causal_self_attention {
  column_parallel_linear qkv;  // [3D/T, D] (+ bias [3D/T])
  row_parallel_linear proj;    // [D, D/T] (+ bias [D], replicated)
  int heads = 0;               // all heads, over every rank

  template <class Space = host>
  struct cache {
    column_parallel_linear::cache<Space> qkv;
    row_parallel_linear::cache<Space> proj;
    tensor<float, Space> qkv_out;   // [B, S, 3 D/T]: per head q, k, v side by side
    tensor<float, Space> probs;     // [B, H/T, S, S]: softmax of the masked scores
    tensor<float, Space> attended;  // [B, S, D/T]: heads' outputs, the projection's input
    tensor<float, Space> d_attended, d_qkv;
    // Scratch for the scores' gradient: [inner, S, S], one step of the walk's pairs.
    tensor<float, Space> d_scores;
  };

  int local_heads() const noexcept { return qkv.tp_size > 0 ? heads / qkv.tp_size : 0; }
  std::int64_t dim() const noexcept { return qkv.in_features(); }
  std::int64_t head_dim() const noexcept { return heads > 0 ? dim() / heads : 0; }

  // x [B, S, D] -> y [B, S, D].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    check_input(x);
    detail::require_distinct(&x, &y, kind, qkv.weight.name);
    qkv.forward(ctx, x, c.qkv_out, c.qkv);
    using ops = ops_of<Ctx>;
    const auto exec = exec_of(ctx);
    const detail::attention_walk w(x.dim(0), x.dim(1), local_heads(), head_dim(), ops::prefers_batched);
    const std::int64_t S = w.S, hd = w.hd, ld = w.ld(), ldo = w.ldo();
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    c.probs.resize(shape{w.B, w.H, S, S});
    c.attended.resize(shape{w.B, S, ldo});
    for (std::int64_t o = 0; o < w.outer; ++o) {
      const float* q = c.qkv_out.data() + w.qkv_offset(o);
      const float *k = q + hd, *v = q + 2 * hd;
      float* p = c.probs.data() + w.probs_offset(o);
      // scores = q k^T / sqrt(hd), then each row's softmax over the positions it may see.
      ops::gemm_strided_batched(exec, transpose::no, transpose::yes, S, S, hd, scale, q, ld, w.qkv_stride(), k, ld,
                                w.qkv_stride(), 0.0f, p, S, w.probs_stride(), w.inner);
      ops::rows(exec, w.inner * S, S, detail::causal_softmax_fn{p, S, w.probs_stride()});
      ops::gemm_strided_batched(exec, transpose::no, transpose::no, S, hd, S, 1.0f, p, S, w.probs_stride(), v, ld,
                                w.qkv_stride(), 0.0f, c.attended.data() + w.out_offset(o), ldo, w.out_stride(),
                                w.inner);
    }
    proj.forward(ctx, c.attended, y, c.proj);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    detail::require_forward_ran(c.qkv.x, kind, qkv.weight.name);
    detail::require_distinct(&dy, &dx, kind, qkv.weight.name);
    proj.backward(ctx, dy, c.d_attended, c.proj);
    const tensor_for<Ctx>& x = *c.qkv.x;
    using ops = ops_of<Ctx>;
    const auto exec = exec_of(ctx);
    const detail::attention_walk w(x.dim(0), x.dim(1), local_heads(), head_dim(), ops::prefers_batched);
    const std::int64_t S = w.S, hd = w.hd, ld = w.ld(), ldo = w.ldo(), ss = S * S;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    c.d_qkv.resize(c.qkv_out.shape());
    c.d_scores.resize(shape{w.inner, S, S});
    float* ds = c.d_scores.data();
    // d_scores is reused by the next step only after this one's GEMMs (one stream).
    for (std::int64_t o = 0; o < w.outer; ++o) {
      const float* q = c.qkv_out.data() + w.qkv_offset(o);
      const float *k = q + hd, *v = q + 2 * hd;
      float* dq = c.d_qkv.data() + w.qkv_offset(o);
      float *dk = dq + hd, *dv = dq + 2 * hd;
      const float* p = c.probs.data() + w.probs_offset(o);
      const float* dout = c.d_attended.data() + w.out_offset(o);
      // dP = dO V^T; dV = P^T dO.
      ops::gemm_strided_batched(exec, transpose::no, transpose::yes, S, S, hd, 1.0f, dout, ldo, w.out_stride(), v, ld,
                                w.qkv_stride(), 0.0f, ds, S, ss, w.inner);
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, 1.0f, p, S, w.probs_stride(), dout,
                                ldo, w.out_stride(), 0.0f, dv, ld, w.qkv_stride(), w.inner);
      // Softmax backward, in place: dS = P (dP - rowsum(P dP)); masked entries stay 0.
      ops::rows(exec, w.inner * S, S, detail::causal_softmax_backward_fn{p, ds, S, w.probs_stride(), ss});
      // scores = scale q k^T: dQ = scale dS K, dK = scale dS^T Q.
      ops::gemm_strided_batched(exec, transpose::no, transpose::no, S, hd, S, scale, ds, S, ss, k, ld,
                                w.qkv_stride(), 0.0f, dq, ld, w.qkv_stride(), w.inner);
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, scale, ds, S, ss, q, ld,
                                w.qkv_stride(), 0.0f, dk, ld, w.qkv_stride(), w.inner);
    }
    qkv.backward(ctx, c.d_qkv, dx, c.qkv);
  }

 private:
  static constexpr const char* kind = "attention";

  template <class Space>
  void check_input(const tensor<float, Space>& x) const {
    const std::int64_t d = dim();
    expects<config_error>(heads > 0 && d % heads == 0 && qkv.tp_size > 0 && heads % qkv.tp_size == 0 &&
                              qkv.local_out_features() == 3 * d / qkv.tp_size &&
                              proj.local_in_features() == d / qkv.tp_size && proj.out_features() == d,
                          [&] {
                            return strata::detail::cat(detail::label(kind, qkv.weight.name), ": ", heads,
                                                       " heads with qkv weight ", qkv.weight.shape,
                                                       " and proj weight ", proj.weight.shape, " over ", qkv.tp_size,
                                                       " tensor-parallel ranks do not fit together (build it with "
                                                       "make_causal_self_attention)");
                          });
    expects<config_error>(x.shape().rank == 3 && x.dim(2) == d, [&] {
      return strata::detail::cat(detail::label(kind, qkv.weight.name), ": input has shape ", x.shape(),
                                 "; expected [batch, sequence, ", d, "]");
    });
  }
};

// Attention over `dim` features in `heads` heads, heads split over tp_size ranks. Weights
// start like torch.nn.Linear's (uniform in +-1/sqrt(dim)), biases at zero.
inline causal_self_attention make_causal_self_attention(int dim, int heads, int tp_rank = 0, int tp_size = 1,
                                                        bool bias = true) {
  strata::expects<config_error>(dim > 0 && heads > 0,
                                strata::detail::cat("attention: dim ", dim, " and heads ", heads, " must be positive"));
  strata::expects<config_error>(dim % heads == 0,
                                strata::detail::cat("attention: dim ", dim, " does not split into ", heads, " heads"));
  (void)make_tp_slice("attention", heads, "heads", tp_rank, tp_size);
  return causal_self_attention{make_column_parallel_linear(dim, 3 * dim, tp_rank, tp_size, bias, false),
                               make_row_parallel_linear(dim, dim, tp_rank, tp_size, bias), heads};
}

}  // namespace strata::nn
