// adamw_update: one element of torch.optim.AdamW (decoupled decay, bias correction)
// over a flat shard, with the 16-bit param write fused in; shared by host and CUDA drivers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "rounding.hpp"
#include "scalar_math.hpp"
#include "vector_access.hpp"

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

  // One element from its values: the updated moments, and the updated param given the
  // root of the new v. Every form below is made of these two, so all give the same bits.
  struct moments {
    float m, v;
  };
  STRATA_HOST_DEVICE moments moments_of(float grad_i, float m, float v) const {
    const float g = grad_i * grad_scale;
    return {beta1 * m + one_minus_beta1 * g, beta2 * v + (one_minus_beta2 * g) * g};
  }
  STRATA_HOST_DEVICE float param_of(float p, float m, float sqrt_v) const {
    const float denom = sqrt_v * inv_bias_correction2_sqrt + eps;
    return p * decay_factor - (step_size * m) / denom;
  }

  // pre_sqrt with grad[i] already read as a float, and post_sqrt without the 16-bit
  // write, returning the updated fp32 param; then write_out writes that. The host driver
  // uses these to convert a whole tile of 16-bit grads in, and of params out, with packed
  // instructions. The split changes no operation: pre_sqrt and post_sqrt are made of them.
  STRATA_HOST_DEVICE float pre_sqrt_of(std::size_t i, float grad_i) const {
    const moments r = moments_of(grad_i, exp_avg[i], exp_avg_sq[i]);
    exp_avg[i] = r.m;
    exp_avg_sq[i] = r.v;
    return r.v;
  }
  STRATA_HOST_DEVICE float post_sqrt_master(std::size_t i, float sqrt_v) const {
    const float p = param_of(master[i], exp_avg[i], sqrt_v);
    master[i] = p;
    return p;
  }
  STRATA_HOST_DEVICE void write_out(std::size_t i, float p) const {
    detail::write_param<W>(param_out, i, p, rounding_key, index_base + i);
  }

  // Elements i .. i + 3 with one 16-byte load and store per fp32 array (and one load of
  // the four grads, one store of four 16-bit params): the CUDA driver's form where every
  // array is aligned (vector_aligned) and i is a multiple of 4. The functor's pointers
  // may alias as far as the compiler knows, so element-wise code cannot be merged into
  // wide accesses by it; here they are explicit.
  static constexpr std::size_t vector_width = 4;
  STRATA_HOST_DEVICE void step_vector(std::size_t i) const {
    using fvec = detail::vec<float, vector_width>;
    const detail::vec<G, vector_width> g = detail::vec<G, vector_width>::load(grad + i);
    fvec m = fvec::load(exp_avg + i), v = fvec::load(exp_avg_sq + i), p = fvec::load(master + i);
    for (std::size_t k = 0; k < vector_width; ++k) {
      const moments r = moments_of(static_cast<float>(g.x[k]), m.x[k], v.x[k]);
      m.x[k] = r.m;
      v.x[k] = r.v;
      p.x[k] = param_of(p.x[k], r.m, detail::sqrt_nonneg(r.v));
    }
    m.store(exp_avg + i);
    v.store(exp_avg_sq + i);
    p.store(master + i);
    if constexpr (W == write_mode::nearest_even) {
      detail::vec<P, vector_width> out;
      for (std::size_t k = 0; k < vector_width; ++k) out.x[k] = round_to<P>(p.x[k]);
      out.store(param_out + i);
    } else {
      for (std::size_t k = 0; k < vector_width; ++k) write_out(i + k, p.x[k]);
    }
  }
  // Whether step_vector may run: every array starts on its vector's alignment.
  bool vector_aligned() const noexcept {
    return detail::aligned_for<float, vector_width>(master) && detail::aligned_for<float, vector_width>(exp_avg) &&
           detail::aligned_for<float, vector_width>(exp_avg_sq) && detail::aligned_for<G, vector_width>(grad) &&
           (W == write_mode::none || detail::aligned_for<P, vector_width>(param_out));
  }

  // Updates m and v of element i and returns v, whose root post_sqrt needs.
  STRATA_HOST_DEVICE float pre_sqrt(std::size_t i) const { return pre_sqrt_of(i, static_cast<float>(grad[i])); }

  // Finishes element i given sqrt(v) of its updated second moment.
  STRATA_HOST_DEVICE void post_sqrt(std::size_t i, float sqrt_v) const { write_out(i, post_sqrt_master(i, sqrt_v)); }

  STRATA_HOST_DEVICE void operator()(std::size_t i) const { post_sqrt(i, detail::sqrt_nonneg(pre_sqrt(i))); }
};

}  // namespace strata::kernels
