// The scaled-dot-product part of causal attention, in any space, for layers that lay out
// q, k and v as they like: multi-head (one key/value head per query head) or grouped-query
// (a key/value head shared by `group` query heads), forward and backward. A space that
// batches GEMMs (a GPU) stores the [S, S] probabilities of each pair; the host runs the
// blocked form (attention_blocked.hpp), which stores a row's log-sum-exp instead.
//
// q, k, v, the output, their gradients and the probabilities are of the activation type
// T (float, or a mixed GPU trainer's 16-bit type, which its GEMMs read directly); the
// softmax's statistics and what it normalises (scores, their gradient) stay float.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../core/math.hpp"
#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"
#include "attention_blocked.hpp"
#include "attention_layout.hpp"
#include "fused_attention.hpp"

namespace strata::nn::detail {

// Row i of each [S, S] score matrix: softmax over columns 0..i (max, float exps summed
// in double, times the float inverse), zeros after, into the probabilities p as T; the
// exps go through the scores s (p itself when T is float: in place). Row r is row r % S
// of matrix r / S, which starts at s + (r / S) s_stride and p + (r / S) p_stride.
template <class T = float>
struct causal_softmax_fn {
  float* s;
  T* p;
  std::int64_t S, s_stride, p_stride;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t i = r % S;
    float* x = s + (r / S) * s_stride + i * S;
    T* y = p + (r / S) * p_stride + i * S;
    // Subtracting the max of what row i sees keeps every exp in (0, 1].
    const float m = row.max(i + 1, [&](std::int64_t j) { return x[j]; });
    row.for_each(i + 1, [&](std::int64_t j) { x[j] = math::exp(x[j] - m); });
    const double sum = row.sum(i + 1, [&](std::int64_t j) { return static_cast<double>(x[j]); });
    const float inv = static_cast<float>(1.0 / sum);
    row.for_each(S, [&](std::int64_t j) { y[j] = round_to<T>(j <= i ? x[j] * inv : 0.0f); });
  }
};

// ds = P (d - rowsum(P d)) on row i's columns 0..i, zeros after, from the probabilities
// p (T) and their gradient d (float), into ds as T (d itself when T is float: in place).
// P widens exactly, and products of two floats are exact in double, so only the order of
// the sum matters.
template <class T = float>
struct causal_softmax_backward_fn {
  const T* p;
  const float* d;
  T* ds;
  std::int64_t S, p_stride, d_stride;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t i = r % S;
    const T* pr = p + (r / S) * p_stride + i * S;
    const float* dr = d + (r / S) * d_stride + i * S;
    T* out = ds + (r / S) * d_stride + i * S;
    const double dot = row.sum(i + 1, [&](std::int64_t j) { return static_cast<double>(pr[j]) * dr[j]; });
    const float fdot = static_cast<float>(dot);
    row.for_each(
        S, [&](std::int64_t j) { out[j] = round_to<T>(j <= i ? static_cast<float>(pr[j]) * (dr[j] - fdot) : 0.0f); });
  }
};

// How the (batch, head) pairs are walked: `outer` steps of one strided batched GEMM over
// `inner` pairs. Batch rows have constant strides everywhere; heads too when each has its
// own key/value head (group 1). A space that batches takes the larger walk of those; one
// that does not (the host) takes the pairs one at a time, which keeps a pair's scores in
// cache. Pairs that share a key/value head come in head order, so their gradients add up
// in a fixed order.
struct attention_walk {
  const attention_layout& l;
  std::int64_t outer, inner;
  bool heads_inner, single;
  attention_walk(const attention_layout& layout, bool batched)
      : l(layout), heads_inner(layout.group == 1 && layout.H >= layout.B), single(!batched) {
    outer = single ? l.B * l.H : heads_inner ? l.B : l.H;
    inner = single ? 1 : heads_inner ? l.H : l.B;
  }
  // The first pair of step o.
  std::int64_t b0(std::int64_t o) const { return single ? o / l.H : heads_inner ? o : 0; }
  std::int64_t h0(std::int64_t o) const { return single ? o % l.H : heads_inner ? 0 : o; }
  std::int64_t q_offset(std::int64_t o) const { return b0(o) * l.S * l.ldq + h0(o) * l.q_head; }
  std::int64_t kv_offset(std::int64_t o) const { return b0(o) * l.S * l.ldkv + (h0(o) / l.group) * l.kv_head; }
  std::int64_t probs_offset(std::int64_t o) const { return (b0(o) * l.H + h0(o)) * l.S * l.S; }
  std::int64_t out_offset(std::int64_t o) const { return b0(o) * l.S * l.ldo() + h0(o) * l.hd; }
  // From one pair of a step to the next.
  std::int64_t q_stride() const { return heads_inner ? l.q_head : l.S * l.ldq; }
  std::int64_t kv_stride() const { return heads_inner ? l.kv_head : l.S * l.ldkv; }
  std::int64_t probs_stride() const { return heads_inner ? l.S * l.S : l.H * l.S * l.S; }
  std::int64_t out_stride() const { return heads_inner ? l.hd : l.S * l.ldo(); }
  // The key/value gradients of step o are written (0) or added to (1): the first query
  // head of a group writes them.
  float kv_beta(std::int64_t o) const { return heads_inner || h0(o) % l.group == 0 ? 0.0f : 1.0f; }
};

// What backward needs of the softmax, in space Space with activations T: each row's
// log-sum-exp [B, H, S] in float (the host's blocks, and a GPU's fused attention), or the
// probabilities [B, H, S, S] as T (a GPU's unfused GEMMs read them). One of the two is
// sized; the other stays empty.
template <class Space, class T = float>
struct attention_saved {
  tensor<float, Space> stats;
  tensor<T, Space> probs;
  bool fused = false;  // a GPU's forward ran fused: backward must too
};

// probs [B, H, S, S] = causal softmax(q k^T / sqrt(hd)); out [B, S, H hd] = probs v. A
// float T computes the scores in probs and normalises them in place; a 16-bit T computes
// them into `scores`, float scratch of one step ([inner, S, S]), and keeps only the
// probabilities as T: exp turns a score's absolute error into the probability's relative
// one, and a bf16 score of 8 would be off by up to 2^-5.
template <class Ctx, class T>
void attention_forward_full(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v, T* probs, T* out,
                            tensor<float, space_of<Ctx>>* scores = nullptr) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  const attention_walk w(l, ops::prefers_batched);
  const std::int64_t S = l.S, hd = l.hd;
  const float scale = attention_scale(hd);
  float* sc = nullptr;
  if constexpr (!std::is_same_v<T, float>) {
    expects(scores != nullptr, "attention: 16-bit activations need float scratch for the scores");
    scores->resize(shape{w.inner, S, S});
    sc = scores->data();
  } else {
    (void)scores;
  }
  for (std::int64_t o = 0; o < w.outer; ++o) {
    T* p = probs + w.probs_offset(o);
    std::int64_t sc_stride = S * S;
    if constexpr (std::is_same_v<T, float>) sc = p, sc_stride = w.probs_stride();
    ops::gemm_strided_batched(exec, transpose::no, transpose::yes, S, S, hd, scale, q + w.q_offset(o), l.ldq,
                              w.q_stride(), k + w.kv_offset(o), l.ldkv, w.kv_stride(), 0.0f, sc, S, sc_stride, w.inner);
    ops::rows(exec, w.inner * S, S, causal_softmax_fn<T>{sc, p, S, sc_stride, w.probs_stride()});
    ops::gemm_strided_batched(exec, transpose::no, transpose::no, S, hd, S, 1.0f, p, S, w.probs_stride(),
                              v + w.kv_offset(o), l.ldkv, w.kv_stride(), 0.0f, out + w.out_offset(o), l.ldo(),
                              w.out_stride(), w.inner);
  }
}

// From d_out [B, S, H hd]: dq (written), dk and dv (written by a group's first head,
// added to by the rest), laid out like q, k and v. d_scores is float scratch: [inner, S,
// S] for dP (float: the softmax's backward subtracts from it, where 16-bit roundings
// would cancel into large relative errors), which a float T turns into dS in place. A
// 16-bit T writes dS, the GEMMs' operand, into ds_scratch as T, and sums a shared
// key/value head's dk and dv over its query heads in float, after dP ([2, inner, S, hd]):
// one rounding, not one per head. Scratch is reused by the next step only after this
// one's GEMMs (one stream).
template <class Ctx, class T>
void attention_backward_full(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v, const T* probs,
                             const T* d_out, T* dq, T* dk, T* dv, tensor<float, space_of<Ctx>>& d_scores,
                             tensor<T, space_of<Ctx>>* ds_scratch = nullptr) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  const attention_walk w(l, ops::prefers_batched);
  const std::int64_t S = l.S, hd = l.hd, ss = S * S;
  const float scale = attention_scale(hd);
  // Grouped heads come one step each (not heads_inner), a group's in a row.
  const bool kv_sum = !std::is_same_v<T, float> && l.group > 1;
  const std::int64_t kv_n = w.inner * S * hd;  // a step's dk (or dv), packed
  d_scores.resize(kv_sum ? shape{w.inner * ss + 2 * kv_n} : shape{w.inner, S, S});
  float* dp = d_scores.data();
  float *gk = dp + w.inner * ss, *gv = gk + kv_n;
  T* ds = nullptr;
  if constexpr (std::is_same_v<T, float>) {
    (void)ds_scratch;
    ds = dp;
  } else {
    expects(ds_scratch != nullptr, "attention: 16-bit activations need scratch for the scores' gradient");
    ds_scratch->resize(shape{w.inner, S, S});
    ds = ds_scratch->data();
  }
  for (std::int64_t o = 0; o < w.outer; ++o) {
    const std::int64_t qo = w.q_offset(o), kvo = w.kv_offset(o);
    const T* p = probs + w.probs_offset(o);
    const T* dout = d_out + w.out_offset(o);
    const float beta = w.kv_beta(o);
    // dP = dO V^T; dV (+)= P^T dO.
    ops::gemm_strided_batched(exec, transpose::no, transpose::yes, S, S, hd, 1.0f, dout, l.ldo(), w.out_stride(),
                              v + kvo, l.ldkv, w.kv_stride(), 0.0f, dp, S, ss, w.inner);
    if (kv_sum)
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, 1.0f, p, S, w.probs_stride(), dout,
                                l.ldo(), w.out_stride(), beta, gv, hd, S * hd, w.inner);
    else
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, 1.0f, p, S, w.probs_stride(), dout,
                                l.ldo(), w.out_stride(), beta, dv + kvo, l.ldkv, w.kv_stride(), w.inner);
    // Softmax backward: dS = P (dP - rowsum(P dP)); masked entries stay 0.
    ops::rows(exec, w.inner * S, S, causal_softmax_backward_fn<T>{p, dp, ds, S, w.probs_stride(), ss});
    // scores = scale q k^T: dQ = scale dS K, dK (+)= scale dS^T Q.
    ops::gemm_strided_batched(exec, transpose::no, transpose::no, S, hd, S, scale, ds, S, ss, k + kvo, l.ldkv,
                              w.kv_stride(), 0.0f, dq + qo, l.ldq, w.q_stride(), w.inner);
    if (kv_sum) {
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, scale, ds, S, ss, q + qo, l.ldq,
                                w.q_stride(), beta, gk, hd, S * hd, w.inner);
      if (w.h0(o) % l.group == l.group - 1) {  // the group's last head: the sums into dk and dv
        ops::rows(exec, w.inner * S, hd, round_rows_fn<T>{gk, hd, dk + kvo, l.ldkv, hd});
        ops::rows(exec, w.inner * S, hd, round_rows_fn<T>{gv, hd, dv + kvo, l.ldkv, hd});
      }
    } else {
      ops::gemm_strided_batched(exec, transpose::yes, transpose::no, S, hd, S, scale, ds, S, ss, q + qo, l.ldq,
                                w.q_stride(), beta, dk + kvo, l.ldkv, w.kv_stride(), w.inner);
    }
  }
}

// out as attention_forward_full gives it, and lse [B, H, S], in blocks.
template <class Ctx, class T>
void attention_forward_blocked(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v, float* lse,
                               T* out) {
  using ops = ops_of<Ctx>;
  check_blocked_attention(l);
  ops::rows(exec_of(ctx), l.B * l.H, l.S * l.S * l.hd,
            blocked_attention_forward_fn<ops, attention_layout, T>{exec_of(ctx), l, q, k, v, lse, out,
                                                                   attention_scale(l.hd)});
}

// dq (written), dk and dv (written) from the forward's out and lse, in blocks.
template <class Ctx, class T>
void attention_backward_blocked(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v,
                                const float* lse, const T* out, const T* d_out, T* dq, T* dk, T* dv) {
  using ops = ops_of<Ctx>;
  check_blocked_attention(l);
  const std::int64_t kv_heads = l.H / l.group;
  ops::rows(exec_of(ctx), l.B * kv_heads, l.group * l.S * l.S * l.hd,
            blocked_attention_backward_fn<ops, attention_layout, T>{exec_of(ctx), l, q, k, v, lse, out, d_out, dq, dk,
                                                                    dv, attention_scale(l.hd), kv_heads});
}

// The layers' entry points, on activations of type T. `saved` is what backward needs of
// the softmax (attention_saved), sized here. A GPU with 16-bit T runs cuDNN's fused
// attention where the build has it and it takes the shape (fused_attention.hpp); else
// the full form, whose scratch `scores` and `ds_scratch` are (attention_forward_full and
// attention_backward_full): a space that batches GEMMs with 16-bit T needs both;
// otherwise they stay untouched (the host keeps no [S, S] matrix).
template <class Ctx, class T>
void attention_forward(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v,
                       attention_saved<space_of<Ctx>, T>& saved, T* out,
                       tensor<float, space_of<Ctx>>* scores = nullptr) {
  if constexpr (ops_of<Ctx>::prefers_batched) {
    if constexpr (has_fused_attention<space_of<Ctx>, T>) {
      saved.fused = fused_attention<space_of<Ctx>>::template takes<T>(l);
      if (saved.fused) {
        saved.probs = {};
        saved.stats.resize(shape{l.B, l.H, l.S});
        fused_attention<space_of<Ctx>>::forward(exec_of(ctx), l, q, k, v, saved.stats.data(), out);
        return;
      }
    }
    saved.stats = {};
    saved.probs.resize(shape{l.B, l.H, l.S, l.S});
    attention_forward_full(ctx, l, q, k, v, saved.probs.data(), out, scores);
  } else {
    (void)scores;
    saved.stats.resize(shape{l.B, l.H, l.S});
    attention_forward_blocked(ctx, l, q, k, v, saved.stats.data(), out);
  }
}

// From d_out [B, S, H hd] (and the forward's out): dq, dk and dv, laid out like q, k and v,
// by the form forward took.
template <class Ctx, class T>
void attention_backward(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v,
                        const attention_saved<space_of<Ctx>, T>& saved, const T* out, const T* d_out, T* dq, T* dk,
                        T* dv, tensor<float, space_of<Ctx>>& d_scores, tensor<T, space_of<Ctx>>* ds_scratch = nullptr) {
  if constexpr (ops_of<Ctx>::prefers_batched) {
    if constexpr (has_fused_attention<space_of<Ctx>, T>)
      if (saved.fused) {
        fused_attention<space_of<Ctx>>::backward(exec_of(ctx), l, q, k, v, saved.stats.data(), out, d_out, dq, dk, dv);
        return;
      }
    attention_backward_full(ctx, l, q, k, v, saved.probs.data(), d_out, dq, dk, dv, d_scores, ds_scratch);
  } else {
    (void)d_scores, (void)ds_scratch;
    attention_backward_blocked(ctx, l, q, k, v, saved.stats.data(), out, d_out, dq, dk, dv);
  }
}

}  // namespace strata::nn::detail
