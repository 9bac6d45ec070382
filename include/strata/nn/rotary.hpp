// nn::rotary_embedding: rotary position embedding (RoPE) of query and key heads, in the
// half-split form of transformers' rotate_half (Llama, Qwen2): within each head, element
// i and i + hd/2 turn by the angle position * theta^(-2i/hd). Has no params.
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "../space/ops.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

namespace detail {

// cos and sin [S, hd/2] of the angles, as transformers computes them in fp32:
// inv_freq = 1 / theta^(2i / hd), angle = inv_freq * position.
struct rotary_table_fn {
  float *cos, *sin;
  std::int64_t half;
  float theta;
  STRATA_HOST_DEVICE void operator()(std::int64_t k) const {
    const std::int64_t pos = k / half, i = k % half;
    const float inv_freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(2 * half));
    const float angle = inv_freq * static_cast<float>(pos);
    cos[k] = std::cos(angle);
    sin[k] = std::sin(angle);
  }
};

// Row r of x [B S, heads hd] (position r % S), in place: (a, b) = (x[i], x[i + hd/2]) of
// each head becomes (a cos - b sin, b cos + a sin), transformers' q cos + rotate_half(q)
// sin; `inverse` turns back (the backward: the transposed rotation).
struct rotary_fn {
  float* x;
  const float *cos, *sin;
  std::int64_t S, heads, hd;
  bool inverse;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const std::int64_t half = hd / 2;
    const float *c = cos + (r % S) * half, *s = sin + (r % S) * half;
    float* xr = x + r * heads * hd;
    row.for_each(heads * half, [&](std::int64_t j) {
      const std::int64_t i = j % half;
      float* xh = xr + (j / half) * hd;
      const float a = xh[i], b = xh[i + half];
      if (inverse) {
        xh[i] = a * c[i] + b * s[i];
        xh[i + half] = b * c[i] - a * s[i];
      } else {
        xh[i] = a * c[i] - b * s[i];
        xh[i + half] = b * c[i] + a * s[i];
      }
    });
  }
};

}  // namespace detail

struct rotary_embedding {
  float theta = 10000.0f;  // rope_theta

  // The angles' cos and sin [S, hd/2] for positions 0..S-1 of heads of hd elements.
  template <class Ctx>
  void table(Ctx& ctx, std::int64_t S, std::int64_t hd, tensor_for<Ctx>& cos, tensor_for<Ctx>& sin) const {
    expects<config_error>(hd > 0 && hd % 2 == 0 && theta > 0.0f, [&] {
      return strata::cat("rotary_embedding: head dim ", hd, " must be even and positive, theta ", theta, " positive");
    });
    cos.resize(shape{S, hd / 2});
    sin.resize(shape{S, hd / 2});
    ops_of<Ctx>::map(exec_of(ctx), S * (hd / 2), detail::rotary_table_fn{cos.data(), sin.data(), hd / 2, theta});
  }

  // x [B, S, heads hd] in place, with a table for S positions (inverse: the backward).
  template <class Ctx>
  void rotate(Ctx& ctx, tensor_for<Ctx>& x, std::int64_t heads, std::int64_t hd, const tensor_for<Ctx>& cos,
              const tensor_for<Ctx>& sin, bool inverse = false) const {
    const std::int64_t S = cos.dim(0), rows = static_cast<std::int64_t>(x.numel()) / (heads * hd);
    ops_of<Ctx>::rows(exec_of(ctx), rows, heads * hd,
                      detail::rotary_fn{x.data(), cos.data(), sin.data(), S, heads, hd, inverse});
  }
};

}  // namespace strata::nn
