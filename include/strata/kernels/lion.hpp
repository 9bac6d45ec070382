// lion_update: one element of the Lion optimizer (Chen et al. 2023, as lion-pytorch)
// over a flat shard; shared by the host and CUDA drivers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "rounding.hpp"
#include "scalar_math.hpp"

namespace strata::kernels {

// For element i, with g = grad[i] * grad_scale:
//   u = sign(beta1 m + (1 - beta1) g)
//   p = p * decay_factor - lr u          (decay_factor = 1 - lr wd, 1 when undecayed)
//   m = beta2 m + (1 - beta2) g
template <class P, class G, write_mode W>
struct lion_update {
  float* master;
  const G* grad;
  float* exp_avg;
  P* param_out;
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float decay_factor;
  float lr;
  std::uint64_t rounding_key;
  std::size_t index_base;

  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    const float g = static_cast<float>(grad[i]) * grad_scale;
    const float m = exp_avg[i];
    const float u = detail::sign(beta1 * m + one_minus_beta1 * g);
    const float p = master[i] * decay_factor - lr * u;
    exp_avg[i] = beta2 * m + one_minus_beta2 * g;
    master[i] = p;
    detail::write_param<W>(param_out, i, p, rounding_key, index_base + i);
  }
};

}  // namespace strata::kernels
