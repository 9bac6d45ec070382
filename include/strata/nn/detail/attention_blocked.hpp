// Causal attention on the host in blocks (FlashAttention's schedule, on CPU threads): the
// scores of a block of queries against a block of keys at a time, with an online softmax,
// so no [S, S] matrix is ever stored. Forward keeps each row's log-sum-exp; backward
// recomputes a block's probabilities from it. Memory per head: O(S block), not S^2.
//
// Threads split the (batch, key/value head) groups and each runs its group's GEMMs on one
// thread, in a fixed order: the bits depend on neither the thread count nor the timing.
//
// q, k, v, the output and the gradients are of the activation type T (float, or 16-bit
// in a host context that runs a mixed GPU trainer's layers). A block's scores and
// probabilities stay float (host scratch: nothing reads them as 16-bit), and so do the
// sums over blocks: a float T sums in place, a 16-bit T in float scratch that rounds
// into it once at the end, not once per block.
#pragma once
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../core/math.hpp"
#include "../../space/ops.hpp"

namespace strata::nn::detail {

// Queries and keys per block: a 64 x 64 block of scores (16 KiB) stays in L1 with its
// row of q and k, and GEMMs this size run near BLAS's peak.
inline constexpr std::int64_t attention_block = 64;

// Thread-local scratch of at least n floats (reused by every block a thread runs).
inline float* attention_scratch(std::size_t n, int slot) {
  thread_local std::vector<float> buffers[6];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

// Row r of dst (row stride ldd) = row r of float src (row stride lds), rounded to T: a
// float sum into 16-bit activations, once.
template <class T>
struct round_rows_fn {
  const float* src;
  std::int64_t lds;
  T* dst;
  std::int64_t ldd, cols;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const float* a = src + r * lds;
    T* o = dst + r * ldd;
    row.for_each(cols, [&](std::int64_t j) { o[j] = round_to<T>(a[j]); });
  }
};

// Forward of unit u = (b, h): out = softmax(scale q k^T, causal) v and lse, each row's
// log of the softmax's denominator (with its max), for backward.
template <class Ops, class Layout, class T = float>
struct blocked_attention_forward_fn {
  typename Ops::exec_type exec;
  Layout l;
  const T *q, *k, *v;
  float* lse;
  T* out;
  float scale;

  template <class Row>
  STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t u) const {
    constexpr bool in_place = std::is_same_v<T, float>;
    const std::int64_t b = u / l.H, h = u % l.H, S = l.S, hd = l.hd, ldo = l.ldo(), bs = attention_block;
    const T* Q = q + b * S * l.ldq + h * l.q_head;
    const T* K = k + b * S * l.ldkv + (h / l.group) * l.kv_head;
    const T* V = v + b * S * l.ldkv + (h / l.group) * l.kv_head;
    T* O = out + b * S * ldo + h * hd;
    float* L = lse + u * S;
    float* s = attention_scratch(static_cast<std::size_t>(bs * bs), 0);
    float* m = attention_scratch(static_cast<std::size_t>(bs), 1);
    // Where a query block's output is summed over key blocks, with row stride lda.
    float* acc = in_place ? nullptr : attention_scratch(static_cast<std::size_t>(bs * hd), 2);
    const std::int64_t lda = in_place ? ldo : hd;
    double sums[attention_block];
    for (std::int64_t i0 = 0; i0 < S; i0 += bs) {
      const std::int64_t nq = std::min(bs, S - i0);
      float* A = acc;
      if constexpr (in_place) A = O + i0 * ldo;
      for (std::int64_t r = 0; r < nq; ++r) {
        m[r] = -std::numeric_limits<float>::infinity();
        sums[r] = 0.0;
        float* o = A + r * lda;
        row.for_each(hd, [&](std::int64_t j) { o[j] = 0.0f; });
      }
      // Key blocks up to the block's last query (causal).
      for (std::int64_t j0 = 0; j0 < i0 + nq; j0 += bs) {
        const std::int64_t nk = std::min(bs, i0 + nq - j0);
        Ops::gemm(exec, transpose::no, transpose::yes, nq, nk, hd, scale, Q + i0 * l.ldq, l.ldq, K + j0 * l.ldkv,
                  l.ldkv, 0.0f, s, nk);
        for (std::int64_t r = 0; r < nq; ++r) {
          float* sr = s + r * nk;
          const std::int64_t seen = std::min(nk, i0 + r - j0 + 1);  // keys of this block row r may see
          if (seen <= 0) {
            row.for_each(nk, [&](std::int64_t j) { sr[j] = 0.0f; });
            continue;
          }
          // The running max, and the old terms rescaled to it (exactly 1 when it holds).
          const float mb = row.max(seen, [&](std::int64_t j) { return sr[j]; });
          const float mn = mb > m[r] ? mb : m[r];
          const float alpha = mn == m[r] ? 1.0f : math::exp(m[r] - mn);  // exp(-inf) is 0
          // The masked tail apart: GCC does not vectorize a call under a condition.
          row.for_each(seen, [&](std::int64_t j) { sr[j] = math::exp(sr[j] - mn); });
          row.for_each(nk - seen, [&](std::int64_t j) { sr[seen + j] = 0.0f; });
          sums[r] = sums[r] * alpha + row.sum(seen, [&](std::int64_t j) { return static_cast<double>(sr[j]); });
          m[r] = mn;
          if (alpha != 1.0f) {
            float* o = A + r * lda;
            row.for_each(hd, [&](std::int64_t j) { o[j] *= alpha; });
          }
        }
        Ops::gemm(exec, transpose::no, transpose::no, nq, hd, nk, 1.0f, s, nk, V + j0 * l.ldkv, l.ldkv, 1.0f, A, lda);
      }
      for (std::int64_t r = 0; r < nq; ++r) {
        const float inv = static_cast<float>(1.0 / sums[r]);
        const float* a = A + r * lda;
        T* o = O + (i0 + r) * ldo;  // a itself when T is float
        row.for_each(hd, [&](std::int64_t j) { o[j] = round_to<T>(a[j] * inv); });
        L[i0 + r] = static_cast<float>(static_cast<double>(m[r]) + std::log(sums[r]));
      }
    }
  }
};

// Backward of unit u = (b, key/value head g): the group's query heads in order, each
// adding into the head's dk and dv. dq, dk, dv are laid out like q, k, v.
template <class Ops, class Layout, class T = float>
struct blocked_attention_backward_fn {
  typename Ops::exec_type exec;
  Layout l;
  const T *q, *k, *v;
  const float* lse;
  const T *out, *d_out;
  T *dq, *dk, *dv;
  float scale;
  std::int64_t kv_heads;

  template <class Row>
  STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t u) const {
    constexpr bool in_place = std::is_same_v<T, float>;
    const std::int64_t b = u / kv_heads, g = u % kv_heads, S = l.S, hd = l.hd, ldo = l.ldo(), bs = attention_block;
    const std::int64_t kv = b * S * l.ldkv + g * l.kv_head;
    const T *K = k + kv, *V = v + kv;
    T *dK = dk + kv, *dV = dv + kv;
    // Where dk and dv are summed over the group's heads and the query blocks (row stride
    // ldg), and a query block's dq over the key blocks (row stride ldgq).
    float *gK = nullptr, *gV = nullptr, *gq = nullptr;
    if constexpr (in_place) {
      gK = dK, gV = dV;
    } else {
      gK = attention_scratch(static_cast<std::size_t>(S * hd), 3);
      gV = attention_scratch(static_cast<std::size_t>(S * hd), 4);
      gq = attention_scratch(static_cast<std::size_t>(bs * hd), 5);
    }
    const std::int64_t ldg = in_place ? l.ldkv : hd, ldgq = in_place ? l.ldq : hd;
    for (std::int64_t t = 0; t < S; ++t) {
      float* a = gK + t * ldg;
      float* c = gV + t * ldg;
      row.for_each(hd, [&](std::int64_t j) { a[j] = 0.0f, c[j] = 0.0f; });
    }
    float* p = attention_scratch(static_cast<std::size_t>(bs * bs), 0);
    float* dp = attention_scratch(static_cast<std::size_t>(bs * bs), 1);
    float* D = attention_scratch(static_cast<std::size_t>(S), 2);
    for (std::int64_t h = g * l.group; h < (g + 1) * l.group; ++h) {
      const T* Q = q + b * S * l.ldq + h * l.q_head;
      T* dQ = dq + b * S * l.ldq + h * l.q_head;
      const T* O = out + b * S * ldo + h * hd;
      const T* dO = d_out + b * S * ldo + h * hd;
      const float* L = lse + (b * l.H + h) * S;
      // D_i = rowsum(dO_i o O_i), which is rowsum(P_i o dP_i): the softmax's backward term.
      for (std::int64_t t = 0; t < S; ++t) {
        const T *o = O + t * ldo, *d = dO + t * ldo;
        D[t] = static_cast<float>(
            row.sum(hd, [&](std::int64_t j) { return static_cast<double>(o[j]) * static_cast<float>(d[j]); }));
      }
      for (std::int64_t i0 = 0; i0 < S; i0 += bs) {
        const std::int64_t nq = std::min(bs, S - i0);
        if constexpr (in_place) gq = dQ + i0 * l.ldq;
        for (std::int64_t j0 = 0; j0 < i0 + nq; j0 += bs) {
          const std::int64_t nk = std::min(bs, i0 + nq - j0);
          // P = exp(scale q k^T - lse), causal; dP = dO v^T.
          Ops::gemm(exec, transpose::no, transpose::yes, nq, nk, hd, scale, Q + i0 * l.ldq, l.ldq, K + j0 * l.ldkv,
                    l.ldkv, 0.0f, p, nk);
          Ops::gemm(exec, transpose::no, transpose::yes, nq, nk, hd, 1.0f, dO + i0 * ldo, ldo, V + j0 * l.ldkv, l.ldkv,
                    0.0f, dp, nk);
          for (std::int64_t r = 0; r < nq; ++r) {
            float *pr = p + r * nk, *dr = dp + r * nk;
            const std::int64_t seen = std::clamp<std::int64_t>(i0 + r - j0 + 1, 0, nk);
            const float lr = L[i0 + r], Dr = D[i0 + r];
            row.for_each(seen, [&](std::int64_t j) {
              const float pj = math::exp(pr[j] - lr);
              pr[j] = pj;
              dr[j] = pj * (dr[j] - Dr);  // dS
            });
            row.for_each(nk - seen, [&](std::int64_t j) { pr[seen + j] = 0.0f, dr[seen + j] = 0.0f; });
          }
          // dV += P^T dO; dQ (+)= scale dS K; dK += scale dS^T Q.
          Ops::gemm(exec, transpose::yes, transpose::no, nk, hd, nq, 1.0f, p, nk, dO + i0 * ldo, ldo, 1.0f,
                    gV + j0 * ldg, ldg);
          Ops::gemm(exec, transpose::no, transpose::no, nq, hd, nk, scale, dp, nk, K + j0 * l.ldkv, l.ldkv,
                    j0 == 0 ? 0.0f : 1.0f, gq, ldgq);
          Ops::gemm(exec, transpose::yes, transpose::no, nk, hd, nq, scale, dp, nk, Q + i0 * l.ldq, l.ldq, 1.0f,
                    gK + j0 * ldg, ldg);
        }
        if constexpr (!in_place) {
          const round_rows_fn<T> round_q{gq, hd, dQ + i0 * l.ldq, l.ldq, hd};
          for (std::int64_t r = 0; r < nq; ++r) round_q(row, r);
        }
      }
    }
    if constexpr (!in_place) {
      const round_rows_fn<T> round_k{gK, hd, dK, l.ldkv, hd}, round_v{gV, hd, dV, l.ldkv, hd};
      for (std::int64_t t = 0; t < S; ++t) {
        round_k(row, t);
        round_v(row, t);
      }
    }
  }
};

// A GEMM inside the threads' region must not throw (that would end the program): the
// leading dimensions are checked once, before it.
template <class Layout>
void check_blocked_attention(const Layout& l) {
  const auto fits = [](std::int64_t x) { return x >= 0 && x <= INT_MAX; };
  expects<config_error>(fits(l.ldq) && fits(l.ldkv) && fits(l.ldo()) && fits(l.hd), [&] {
    return strata::cat("attention: row strides ", l.ldq, ", ", l.ldkv, ", ", l.ldo(),
                       " exceed the 32-bit range of CBLAS");
  });
}

}  // namespace strata::nn::detail
