// nn::grouped_query_attention: causal self-attention whose key/value heads are each shared
// by a group of query heads, with rotary position embedding (Qwen2's and Llama's
// attention); with T tensor-parallel ranks each holds H/T query and K/T key/value heads.
#pragma once
#include <cmath>
#include <cstdint>

#include "../model/param.hpp"
#include "../space/call_scratch.hpp"
#include "../space/tensor.hpp"
#include "detail/attention_core.hpp"
#include "detail/checks.hpp"
#include "rotary.hpp"
#include "tp/column_parallel_linear.hpp"
#include "tp/row_parallel_linear.hpp"

namespace strata::nn {

// q, k and v are separate column-parallel projections (transformers' q_proj, k_proj,
// v_proj, with biases in Qwen2), so a rank's rows of each are whole heads; query head j
// uses key/value head j / (H / K). o_proj is row-parallel: its all-reduce sums the
// heads; in backward one all-reduce sums the three projections' input gradients
// (shared_input_backward). With T = 1 nothing is communicated.
struct grouped_query_attention {
  column_parallel_linear q_proj;  // [H hd / T, D] (+ bias)
  column_parallel_linear k_proj;  // [K hd / T, D] (+ bias)
  column_parallel_linear v_proj;  // [K hd / T, D] (+ bias)
  row_parallel_linear o_proj;     // [D, H hd / T]
  int heads = 0, kv_heads = 0;    // over every rank
  rotary_embedding rope;

  // What one call uses and leaves (call_scratch.hpp): backward's gradients, and a GPU's
  // scratch for the scores and their gradient (as causal_self_attention's).
  template <class Space = host, class Act = float>
  struct scratch {
    tensor<Act, Space> d_attended, dq, dk, dv;
    tensor<float, Space> d_scores;
    tensor<Act, Space> d_scores_act;
  };
  template <class Space = host, class Act = float>
  struct cache {
    column_parallel_linear::cache<Space, Act> q_proj, k_proj, v_proj;
    row_parallel_linear::cache<Space, Act> o_proj;
    tensor<Act, Space> q, k, v;  // [B, S, heads hd] after rotation (q, k)
    // [S, hd / 2], float whatever Act: the angles at fp32 for a small table.
    tensor<float, Space> cos, sin;
    detail::attention_saved<Space, Act> saved;  // the softmax's, for backward (as causal_self_attention's)
    tensor<Act, Space> attended;                // [B, S, H hd / T]: the heads' outputs, o_proj's input
    call_scratch<scratch<Space, Act>> work;
  };

  int tp_size() const noexcept { return q_proj.tp_size; }
  int local_heads() const noexcept { return tp_size() > 0 ? heads / tp_size() : 0; }
  int local_kv_heads() const noexcept { return tp_size() > 0 ? kv_heads / tp_size() : 0; }
  std::int64_t dim() const noexcept { return q_proj.in_features(); }
  std::int64_t head_dim() const noexcept { return heads > 0 ? q_proj.out_features() / heads : 0; }

  // x [B, S, D] -> y [B, S, D].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_input(x);
    detail::require_distinct(&x, &y, kind, q_proj.weight.name);
    q_proj.forward(ctx, x, c.q, c.q_proj);
    k_proj.forward(ctx, x, c.k, c.k_proj);
    v_proj.forward(ctx, x, c.v, c.v_proj);
    const detail::attention_layout l = layout(x);
    rope.table(ctx, l.S, l.hd, c.cos, c.sin);
    rope.rotate(ctx, c.q, l.H, c.k, local_kv_heads(), l.hd, c.cos, c.sin);
    c.attended.resize(shape{l.B, l.S, l.ldo()});
    detail::attention_forward(ctx, l, c.q.data(), c.k.data(), c.v.data(), c.saved, c.attended.data(),
                              &scratch_of(ctx, c.work).d_scores);
    o_proj.forward(ctx, c.attended, y, c.o_proj);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.q_proj.x, kind, q_proj.weight.name);
    detail::require_distinct(&dy, &dx, kind, q_proj.weight.name);
    auto& w = scratch_of(ctx, c.work);
    o_proj.backward(ctx, dy, w.d_attended, c.o_proj);
    const detail::attention_layout l = layout(*c.q_proj.x);
    w.dq.resize(c.q.shape());
    w.dk.resize(c.k.shape());
    w.dv.resize(c.v.shape());
    detail::attention_backward(ctx, l, c.q.data(), c.k.data(), c.v.data(), c.saved, c.attended.data(),
                               w.d_attended.data(), w.dq.data(), w.dk.data(), w.dv.data(), w.d_scores, &w.d_scores_act);
    // The rotation is orthogonal: its backward turns the gradients back.
    rope.rotate(ctx, w.dq, l.H, w.dk, local_kv_heads(), l.hd, c.cos, c.sin, true);
    shared_input_backward(ctx, {{q_proj, w.dq, c.q_proj}, {k_proj, w.dk, c.k_proj}, {v_proj, w.dv, c.v_proj}}, dx);
  }

 private:
  static constexpr const char* kind = "grouped_query_attention";

  template <class E, class Space>
  detail::attention_layout layout(const tensor<E, Space>& x) const {
    const std::int64_t H = local_heads(), K = local_kv_heads(), hd = head_dim();
    return {x.dim(0), x.dim(1), H, hd, H / K, H * hd, hd, K * hd, hd};
  }

  template <class E, class Space>
  void check_input(const tensor<E, Space>& x) const {
    const int T = tp_size();
    expects<config_error>(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && T > 0 && kv_heads % T == 0 &&
                              q_proj.out_features() % heads == 0 && k_proj.out_features() == kv_heads * head_dim() &&
                              v_proj.out_features() == kv_heads * head_dim() &&
                              o_proj.local_in_features() == q_proj.local_out_features() &&
                              o_proj.out_features() == dim() && head_dim() % 2 == 0,
                          [&] {
                            return strata::cat(detail::label(kind, q_proj.weight.name), ": ", heads, " heads and ",
                                               kv_heads, " key/value heads with q_proj ", q_proj.weight.shape,
                                               ", k_proj ", k_proj.weight.shape, ", v_proj ", v_proj.weight.shape,
                                               " and o_proj ", o_proj.weight.shape, " over ", T,
                                               " tensor-parallel ranks do not fit together (build it with "
                                               "make_grouped_query_attention)");
                          });
    expects<config_error>(x.shape().rank == 3 && x.dim(2) == dim(), [&] {
      return strata::cat(detail::label(kind, q_proj.weight.name), ": input has shape ", x.shape(),
                         "; expected [batch, sequence, ", dim(), "]");
    });
  }
};

// Attention over `dim` features in `heads` query heads of dim / heads elements sharing
// `kv_heads` key/value heads, both split over tp_size ranks (a tp_size that does not
// divide kv_heads is refused: a key/value head cannot be split). Projections start like
// torch.nn.Linear's (uniform in +-1/sqrt(dim)), biases at zero; Qwen2 has q/k/v biases
// and none on o_proj.
inline grouped_query_attention make_grouped_query_attention(int dim, int heads, int kv_heads, float rope_theta,
                                                            int tp_rank = 0, int tp_size = 1, bool qkv_bias = true) {
  expects<config_error>(dim > 0 && heads > 0 && kv_heads > 0, [&] {
    return strata::cat("grouped_query_attention: dim ", dim, ", heads ", heads, " and kv_heads ", kv_heads,
                       " must be positive");
  });
  expects<config_error>(dim % heads == 0 && (dim / heads) % 2 == 0, [&] {
    return strata::cat("grouped_query_attention: dim ", dim, " does not split into ", heads,
                       " heads of an even size (rotary embedding turns pairs)");
  });
  expects<config_error>(heads % kv_heads == 0, [&] {
    return strata::cat("grouped_query_attention: ", heads, " query heads do not group evenly over ", kv_heads,
                       " key/value heads");
  });
  expects<config_error>(rope_theta > 0.0f, [&] {
    return strata::cat("grouped_query_attention: rope_theta ", rope_theta, " must be positive");
  });
  (void)make_tp_slice("grouped_query_attention", kv_heads, "key/value heads", tp_rank, tp_size);
  const int hd = dim / heads;
  grouped_query_attention a;
  a.q_proj = make_column_parallel_linear(dim, heads * hd, tp_rank, tp_size, qkv_bias);
  a.k_proj = make_column_parallel_linear(dim, kv_heads * hd, tp_rank, tp_size, qkv_bias);
  a.v_proj = make_column_parallel_linear(dim, kv_heads * hd, tp_rank, tp_size, qkv_bias);
  a.o_proj = make_row_parallel_linear(heads * hd, dim, tp_rank, tp_size, false);
  a.heads = heads;
  a.kv_heads = kv_heads;
  a.rope.theta = rope_theta;
  return a;
}

}  // namespace strata::nn
