// nn::rotary_embedding: rotary position embedding (RoPE) of query and key heads, in the
// half-split form of transformers' rotate_half (Llama, Qwen2): within each head, element
// i and i + hd/2 turn by the angle position * theta^(-2i/hd). Has no params.
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../space/ops.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

namespace detail {

// cos and sin [S, hd/2] of the angles, as transformers computes them in fp32:
// inv_freq = 1 / theta^(2i / hd), angle = inv_freq * position; stored as C (float, or
// rounded once to 16 bits as transformers casts them to a 16-bit model's dtype).
template <class C = float>
struct rotary_table_fn {
  C *cos, *sin;
  std::int64_t half;
  float theta;
  STRATA_HOST_DEVICE void operator()(std::int64_t k) const {
    const std::int64_t pos = k / half, i = k % half;
    const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(2 * half));
    const float angle = inv_freq * static_cast<float>(pos);
    cos[k] = round_to<C>(std::cos(angle));
    sin[k] = round_to<C>(std::sin(angle));
  }
};

// Row r of x [B S, heads hd] (position r % S), in place: (a, b) = (x[i], x[i + hd/2]) of
// each head becomes (a cos - b sin, b cos + a sin), transformers' q cos + rotate_half(q)
// sin; `inverse` turns back (the backward: the transposed rotation). x of the activation
// type T and the table of C, read as float; each result rounded once to T. x2 (heads2
// heads a row, the same rows) is turned in the same kernel: k beside q.
template <class T = float, class C = float>
struct rotary_fn {
  T* x;
  const C *cos, *sin;
  std::int64_t S, heads, hd;
  bool inverse;
  T* x2 = nullptr;
  std::int64_t heads2 = 0;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t half = hd / 2;
    const C *c = cos + (r % S) * half, *s = sin + (r % S) * half;
    turn(row, x + r * heads * hd, heads, c, s);
    if (heads2 > 0) turn(row, x2 + r * heads2 * hd, heads2, c, s);
  }

 private:
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void turn(const Row& row, T* xr, std::int64_t n, const C* c, const C* s) const {
    const std::int64_t half = hd / 2;
    row.for_each(n * half, [&](std::int64_t j) {
      const std::int64_t i = j % half;
      T* xh = xr + (j / half) * hd;
      const float a = static_cast<float>(xh[i]), b = static_cast<float>(xh[i + half]);
      const float ci = static_cast<float>(c[i]), si = static_cast<float>(s[i]);
      if (inverse) {
        xh[i] = round_to<T>(a * ci + b * si);
        xh[i + half] = round_to<T>(b * ci - a * si);
      } else {
        xh[i] = round_to<T>(a * ci - b * si);
        xh[i + half] = round_to<T>(b * ci + a * si);
      }
    });
  }
};

}  // namespace detail

struct rotary_embedding {
  float theta = 10000.0f;  // rope_theta

  // The angles' cos and sin [S, hd/2] for positions 0..S-1 of heads of hd elements. The
  // table's element type is the caller's: float keeps the angles at fp32 (the table is
  // small), the activation type rounds them as transformers does in a 16-bit model.
  template <class Ctx, class C>
  void table(Ctx& ctx, std::int64_t S, std::int64_t hd, tensor<C, space_of<Ctx>>& cos,
             tensor<C, space_of<Ctx>>& sin) const {
    expects<config_error>(hd > 0 && hd % 2 == 0 && theta > 0.0f, [&] {
      return strata::cat("rotary_embedding: head dim ", hd, " must be even and positive, theta ", theta, " positive");
    });
    cos.resize(shape{S, hd / 2});
    sin.resize(shape{S, hd / 2});
    ops_of<Ctx>::map(exec_of(ctx), S * (hd / 2), detail::rotary_table_fn<C>{cos.data(), sin.data(), hd / 2, theta});
  }

  // x [B, S, heads hd] in place (of the activation type, or any element type), with a
  // table for S positions (inverse: the backward).
  template <class Ctx, class T, class C>
  void rotate(Ctx& ctx, tensor<T, space_of<Ctx>>& x, std::int64_t heads, std::int64_t hd,
              const tensor<C, space_of<Ctx>>& cos, const tensor<C, space_of<Ctx>>& sin, bool inverse = false) const {
    const std::int64_t S = cos.dim(0), rows = static_cast<std::int64_t>(x.numel()) / (heads * hd);
    ops_of<Ctx>::rows(exec_of(ctx), rows, heads * hd,
                      detail::rotary_fn<T, C>{x.data(), cos.data(), sin.data(), S, heads, hd, inverse});
  }
  // q [B, S, heads hd] and k [B, S, kv_heads hd] in one kernel: rotate(q) and rotate(k)'s
  // bits.
  template <class Ctx, class T, class C>
  void rotate(Ctx& ctx, tensor<T, space_of<Ctx>>& q, std::int64_t heads, tensor<T, space_of<Ctx>>& k,
              std::int64_t kv_heads, std::int64_t hd, const tensor<C, space_of<Ctx>>& cos,
              const tensor<C, space_of<Ctx>>& sin, bool inverse = false) const {
    const std::int64_t S = cos.dim(0), rows = static_cast<std::int64_t>(q.numel()) / (heads * hd);
    expects<config_error>(static_cast<std::int64_t>(k.numel()) == rows * kv_heads * hd, [&] {
      return strata::cat("rotary_embedding: q ", q.shape(), " of ", heads, " heads and k ", k.shape(), " of ", kv_heads,
                         " heads of ", hd, " elements do not have the same rows");
    });
    ops_of<Ctx>::rows(
        exec_of(ctx), rows, (heads + kv_heads) * hd,
        detail::rotary_fn<T, C>{q.data(), cos.data(), sin.data(), S, heads, hd, inverse, k.data(), kv_heads});
  }
};

}  // namespace strata::nn
