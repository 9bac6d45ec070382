// nn::causal_self_attention: multi-head self-attention where position i attends to
// positions <= i, on [B, S, D] activations; with T tensor-parallel ranks each holds H/T heads.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../model/param.hpp"
#include "../parallel/tensor_parallel.hpp"
#include "../space/tensor.hpp"
#include "detail/blas.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

// The q/k/v projection is one column-parallel linear whose full [3D, D] weight groups its
// rows by head (q_h, k_h, v_h for h = 0..H-1, Megatron's layout), so a contiguous slice of
// rows is a set of whole heads and each rank attends over its own heads with no
// communication. The output projection is row-parallel: its all-reduce sums the heads.
// With T = 1 this is plain attention (the projections communicate nothing).
struct causal_self_attention {
  parallel::column_parallel_linear qkv;  // [3D/T, D] (+ bias [3D/T])
  parallel::row_parallel_linear proj;    // [D, D/T] (+ bias [D], replicated)
  int heads = 0;                         // all heads, over every rank

  template <class Space = host>
  struct cache {
    parallel::column_parallel_linear::cache<Space> qkv;
    parallel::row_parallel_linear::cache<Space> proj;
    tensor<float, Space> qkv_out;   // [B, S, 3 D/T]: per head q, k, v side by side
    tensor<float, Space> probs;     // [B, H/T, S, S]: softmax of the masked scores
    tensor<float, Space> attended;  // [B, S, D/T]: heads' outputs, the projection's input
    tensor<float, Space> d_attended, d_qkv;
    // Scratch for the scores' gradient: [S, S], one (batch, head) at a time on the host;
    // [n, S, S] on a device, one batched GEMM's worth (n heads or n batch rows).
    tensor<float, Space> d_scores;
  };

  int local_heads() const noexcept { return qkv.tp_size > 0 ? heads / qkv.tp_size : 0; }
  std::int64_t dim() const noexcept { return qkv.in_features(); }
  std::int64_t head_dim() const noexcept { return heads > 0 ? dim() / heads : 0; }

  // x [B, S, D] -> y [B, S, D].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    check_input(x);
    nn::detail::require_distinct(&x, &y, kind, qkv.weight.name);
    qkv.forward(ctx, x, c.qkv_out, c.qkv);
    const std::int64_t B = x.dim(0), S = x.dim(1), H = local_heads(), hd = head_dim();
    const std::int64_t ld = 3 * H * hd, ldo = H * hd;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    c.probs.resize(shape{B, H, S, S});
    c.attended.resize(shape{B, S, ldo});
    using nn::detail::transpose;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          const float* q = c.qkv_out.data() + b * S * ld + h * 3 * hd;
          const float *k = q + hd, *v = q + 2 * hd;
          float* p = c.probs.data() + (b * H + h) * S * S;
          // scores = q k^T / sqrt(hd), then each row's softmax over the positions it may see.
          nn::detail::gemm(host{}, transpose::no, transpose::yes, S, S, hd, scale, q, ld, k, ld, 0.0f, p, S);
          nn::detail::for_rows(S, S, [&](std::int64_t i) { causal_softmax_row(p + i * S, i, S); });
          nn::detail::gemm(host{}, transpose::no, transpose::no, S, hd, S, 1.0f, p, S, v, ld, 0.0f,
                           c.attended.data() + b * S * ldo + h * hd, ldo);
        }
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      const walk w(B, S, H, hd);
      const float* qkv_out = c.qkv_out.data();
      float *probs = c.probs.data(), *attended = c.attended.data();
      for (std::int64_t o = 0; o < w.outer; ++o) {
        const float* q = qkv_out + o * w.qkv_outer;
        ops::gemm_strided_batched(ctx.exec(), transpose::no, transpose::yes, S, S, hd, scale, q, ld, w.qkv_inner,
                                  q + hd, ld, w.qkv_inner, 0.0f, probs + o * w.probs_outer, S, w.probs_inner,
                                  w.inner);
      }
      // [B, H] score matrices back to back: one launch for every row.
      ops::causal_softmax_forward(ctx.exec(), B * H, S, probs, S * S);
      for (std::int64_t o = 0; o < w.outer; ++o) {
        const float* v = qkv_out + o * w.qkv_outer + 2 * hd;
        ops::gemm_strided_batched(ctx.exec(), transpose::no, transpose::no, S, hd, S, 1.0f,
                                  probs + o * w.probs_outer, S, w.probs_inner, v, ld, w.qkv_inner, 0.0f,
                                  attended + o * w.out_outer, ldo, w.out_inner, w.inner);
      }
    }
    proj.forward(ctx, c.attended, y, c.proj);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.qkv.x, kind, qkv.weight.name);
    nn::detail::require_distinct(&dy, &dx, kind, qkv.weight.name);
    proj.backward(ctx, dy, c.d_attended, c.proj);
    const tensor_for<Ctx>& x = *c.qkv.x;
    const std::int64_t B = x.dim(0), S = x.dim(1), H = local_heads(), hd = head_dim();
    const std::int64_t ld = 3 * H * hd, ldo = H * hd;
    const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
    c.d_qkv.resize(c.qkv_out.shape());
    using nn::detail::transpose;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      c.d_scores.resize(shape{S, S});
      float* ds = c.d_scores.data();
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < H; ++h) {
          const float* q = c.qkv_out.data() + b * S * ld + h * 3 * hd;
          const float *k = q + hd, *v = q + 2 * hd;
          float* dq = c.d_qkv.data() + b * S * ld + h * 3 * hd;
          float *dk = dq + hd, *dv = dq + 2 * hd;
          const float* p = c.probs.data() + (b * H + h) * S * S;
          const float* dout = c.d_attended.data() + b * S * ldo + h * hd;
          // dP = dO V^T; dV = P^T dO.
          nn::detail::gemm(host{}, transpose::no, transpose::yes, S, S, hd, 1.0f, dout, ldo, v, ld, 0.0f, ds, S);
          nn::detail::gemm(host{}, transpose::yes, transpose::no, S, hd, S, 1.0f, p, S, dout, ldo, 0.0f, dv, ld);
          // Softmax backward, in place: dS = P (dP - rowsum(P dP)); masked entries stay 0.
          nn::detail::for_rows(S, S, [&](std::int64_t i) { softmax_backward_row(p + i * S, ds + i * S, i, S); });
          // scores = scale q k^T: dQ = scale dS K, dK = scale dS^T Q.
          nn::detail::gemm(host{}, transpose::no, transpose::no, S, hd, S, scale, ds, S, k, ld, 0.0f, dq, ld);
          nn::detail::gemm(host{}, transpose::yes, transpose::no, S, hd, S, scale, ds, S, q, ld, 0.0f, dk, ld);
        }
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      const walk w(B, S, H, hd);
      c.d_scores.resize(shape{w.inner, S, S});
      const std::int64_t ss = S * S;
      float* ds = c.d_scores.data();
      const float *qkv_out = c.qkv_out.data(), *probs = c.probs.data(), *d_att = c.d_attended.data();
      float* d_qkv = c.d_qkv.data();
      // The same steps as the host's, each over w.inner matrices at once; d_scores is
      // reused by the next outer step only after this one's GEMMs (one stream).
      for (std::int64_t o = 0; o < w.outer; ++o) {
        const float* q = qkv_out + o * w.qkv_outer;
        const float *k = q + hd, *v = q + 2 * hd;
        float* dq = d_qkv + o * w.qkv_outer;
        float *dk = dq + hd, *dv = dq + 2 * hd;
        const float* p = probs + o * w.probs_outer;
        const float* dout = d_att + o * w.out_outer;
        ops::gemm_strided_batched(ctx.exec(), transpose::no, transpose::yes, S, S, hd, 1.0f, dout, ldo, w.out_inner,
                                  v, ld, w.qkv_inner, 0.0f, ds, S, ss, w.inner);
        ops::gemm_strided_batched(ctx.exec(), transpose::yes, transpose::no, S, hd, S, 1.0f, p, S, w.probs_inner,
                                  dout, ldo, w.out_inner, 0.0f, dv, ld, w.qkv_inner, w.inner);
        ops::causal_softmax_backward(ctx.exec(), w.inner, S, p, w.probs_inner, ds, ss);
        ops::gemm_strided_batched(ctx.exec(), transpose::no, transpose::no, S, hd, S, scale, ds, S, ss, k, ld,
                                  w.qkv_inner, 0.0f, dq, ld, w.qkv_inner, w.inner);
        ops::gemm_strided_batched(ctx.exec(), transpose::yes, transpose::no, S, hd, S, scale, ds, S, ss, q, ld,
                                  w.qkv_inner, 0.0f, dk, ld, w.qkv_inner, w.inner);
      }
    }
    qkv.backward(ctx, c.d_qkv, dx, c.qkv);
  }

 private:
  static constexpr const char* kind = "attention";

  // How a device run walks the (batch, head) pairs: `outer` steps of one strided batched
  // GEMM over `inner` matrices. The pairs' offsets are b S ld + h 3 hd in qkv_out,
  // (b H + h) S S in probs and b S ldo + h hd in attended, so heads and batch rows each
  // have a constant stride, but not both together: batch over the larger of the two.
  struct walk {
    std::int64_t outer, inner;
    std::int64_t qkv_outer, qkv_inner, probs_outer, probs_inner, out_outer, out_inner;
    walk(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t hd) {
      const std::int64_t ld = 3 * H * hd, ldo = H * hd;
      const std::int64_t b_qkv = S * ld, h_qkv = 3 * hd, b_probs = H * S * S, h_probs = S * S, b_out = S * ldo,
                         h_out = hd;
      const bool heads_inner = H >= B;
      outer = heads_inner ? B : H;
      inner = heads_inner ? H : B;
      qkv_outer = heads_inner ? b_qkv : h_qkv;
      qkv_inner = heads_inner ? h_qkv : b_qkv;
      probs_outer = heads_inner ? b_probs : h_probs;
      probs_inner = heads_inner ? h_probs : b_probs;
      out_outer = heads_inner ? b_out : h_out;
      out_inner = heads_inner ? h_out : b_out;
    }
  };

  // Row i sees columns 0..i: subtracting their max keeps every exp in (0, 1].
  static void causal_softmax_row(float* row, std::int64_t i, std::int64_t S) {
    float m = row[0];
    for (std::int64_t j = 1; j <= i; ++j) m = row[j] > m ? row[j] : m;
    double sum = 0.0;
    for (std::int64_t j = 0; j <= i; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (std::int64_t j = i + 1; j < S; ++j) row[j] = 0.0f;
  }
  static void softmax_backward_row(const float* p, float* d, std::int64_t i, std::int64_t S) {
    double dot = 0.0;
    for (std::int64_t j = 0; j <= i; ++j) dot += static_cast<double>(p[j]) * d[j];
    const float fdot = static_cast<float>(dot);
    for (std::int64_t j = 0; j <= i; ++j) d[j] = p[j] * (d[j] - fdot);
    for (std::int64_t j = i + 1; j < S; ++j) d[j] = 0.0f;
  }

  template <class Space>
  void check_input(const tensor<float, Space>& x) const {
    const std::int64_t d = dim();
    if (heads <= 0 || d % heads != 0 || qkv.tp_size <= 0 || heads % qkv.tp_size != 0 ||
        qkv.local_out_features() != 3 * d / qkv.tp_size || proj.local_in_features() != d / qkv.tp_size ||
        proj.out_features() != d) [[unlikely]]
      nn::detail::fail(
          strata::detail::cat(nn::detail::label(kind, qkv.weight.name), ": ", heads, " heads with qkv weight ",
                              qkv.weight.shape, " and proj weight ", proj.weight.shape, " over ", qkv.tp_size,
                              " tensor-parallel ranks do not fit together (build it with "
                              "make_causal_self_attention)"),
          std::source_location::current());
    if (x.shape().rank != 3 || x.dim(2) != d) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label(kind, qkv.weight.name), ": input has shape ", x.shape(),
                                           "; expected [batch, sequence, ", d, "]"),
                       std::source_location::current());
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
  (void)strata::detail::make_tp_slice("attention", heads, "heads", tp_rank, tp_size);
  return causal_self_attention{parallel::make_column_parallel_linear(dim, 3 * dim, tp_rank, tp_size, bias, false),
                               parallel::make_row_parallel_linear(dim, dim, tp_rank, tp_size, bias), heads};
}

}  // namespace strata::nn
