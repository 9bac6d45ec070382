// adamw_update: one element of torch.optim.AdamW (decoupled decay, bias correction)
// over a flat shard, with the 16-bit param write fused in; shared by host and CUDA drivers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "rounding.hpp"
#include "scalar_math.hpp"

namespace strata::kernels {

// For element i, with g = grad[i] * grad_scale:
//   m = beta1 m + (1 - beta1) g
//   v = beta2 v + ((1 - beta2) g) g
//   p = p * decay_factor - (step_size m) / (sqrt(v) * inv_bias_correction2_sqrt + eps)
// where decay_factor = 1 - lr wd (1 for an undecayed run), step_size = lr / (1 - beta1^t)
// and inv_bias_correction2_sqrt = 1 / sqrt(1 - beta2^t), all computed once per step in
// double on the host (optim/adamw.hpp). That is torch's single-tensor AdamW, except that
// torch divides sqrt(v) by sqrt(bc2) where this multiplies by its reciprocal: one
// division less per element, at most one ulp of the denominator apart.
//
// The update is split at the square root (pre_sqrt / post_sqrt) so that the host driver
// can take the roots of a whole tile with packed instructions; operator() is the fused
// form the CUDA driver runs. Both give the same bits: the root is correctly rounded
// either way.
template <class P, class G, write_mode W>
struct adamw_update {
  float* master;      // fp32 weights (the params themselves in fp32 mode)
  const G* grad;      // float, bf16 or fp16
  float* exp_avg;     // m
  float* exp_avg_sq;  // v
  P* param_out;       // the 16-bit compute copy; unused when W == none
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float decay_factor;
  float step_size;
  float inv_bias_correction2_sqrt;
  float eps;
  std::uint64_t rounding_key;  // stochastic rounding only
  std::size_t index_base;      // global index of element 0 of this shard (stochastic rounding)

  // What the host driver's tile form needs to know (kernels/host_driver.hpp).
  using grad_type = G;
  using param_type = P;
  static constexpr write_mode write = W;

  // pre_sqrt with grad[i] already read as a float, and post_sqrt without the 16-bit
  // write, returning the updated fp32 param; then write_out writes that. The host driver
  // uses these to convert a whole tile of 16-bit grads in, and of params out, with packed
  // instructions. The split changes no operation: pre_sqrt and post_sqrt are made of them.
  STRATA_HOST_DEVICE float pre_sqrt_of(std::size_t i, float grad_i) const {
    const float g = grad_i * grad_scale;
    const float m = beta1 * exp_avg[i] + one_minus_beta1 * g;
    const float v = beta2 * exp_avg_sq[i] + (one_minus_beta2 * g) * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    return v;
  }
  STRATA_HOST_DEVICE float post_sqrt_master(std::size_t i, float sqrt_v) const {
    const float denom = sqrt_v * inv_bias_correction2_sqrt + eps;
    const float p = master[i] * decay_factor - (step_size * exp_avg[i]) / denom;
    master[i] = p;
    return p;
  }
  STRATA_HOST_DEVICE void write_out(std::size_t i, float p) const {
    detail::write_param<W>(param_out, i, p, rounding_key, index_base + i);
  }

  // Updates m and v of element i and returns v, whose root post_sqrt needs.
  STRATA_HOST_DEVICE float pre_sqrt(std::size_t i) const { return pre_sqrt_of(i, static_cast<float>(grad[i])); }

  // Finishes element i given sqrt(v) of its updated second moment.
  STRATA_HOST_DEVICE void post_sqrt(std::size_t i, float sqrt_v) const { write_out(i, post_sqrt_master(i, sqrt_v)); }

  STRATA_HOST_DEVICE void operator()(std::size_t i) const { post_sqrt(i, detail::sqrt_nonneg(pre_sqrt(i))); }
};

}  // namespace strata::kernels
