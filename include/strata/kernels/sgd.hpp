// sgd_update: one element of torch.optim.SGD (L2 weight decay, momentum with
// dampening, nesterov) over a flat shard; shared by the host and CUDA drivers.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../core/config.hpp"
#include "rounding.hpp"

namespace strata::kernels {

// For element i, with d = grad[i] * grad_scale:
//   d = d + weight_decay p                      (when weight_decay != 0)
//   buf = first ? d : momentum buf + (1 - dampening) d          (Momentum only)
//   d = nesterov ? d + momentum buf : buf                        (Momentum only)
//   p = p - lr d
// `first` is the first step, where torch initialises the buffer to a copy of d.
// Momentum is a template parameter because without it there is no buffer to read
// (the pointer may be null) and a loop cannot be vectorized around a conditional load.
template <class P, class G, write_mode W, bool Momentum>
struct sgd_update {
  float* master;
  const G* grad;
  float* momentum_buffer;  // unused (may be null) when !Momentum
  P* param_out;
  float grad_scale;
  float weight_decay;  // 0 for an undecayed run
  float lr;
  float momentum;
  float one_minus_dampening;
  bool nesterov;
  bool first;
  std::uint64_t rounding_key;
  std::size_t index_base;

  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    const float p = master[i];
    float d = static_cast<float>(grad[i]) * grad_scale;
    // A select, not a skipped statement: with weight_decay == 0 torch adds nothing,
    // and 0 * inf must not turn an inf weight's step into NaN.
    d = weight_decay != 0.0f ? d + weight_decay * p : d;
    if constexpr (Momentum) {
      const float b = first ? d : momentum * momentum_buffer[i] + one_minus_dampening * d;
      momentum_buffer[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    const float updated = p - lr * d;
    master[i] = updated;
    detail::write_param<W>(param_out, i, updated, rounding_key, index_base + i);
  }
};

}  // namespace strata::kernels
