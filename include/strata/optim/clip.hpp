// Global-norm gradient clipping math, as torch.nn.utils.clip_grad_norm_: the norm comes
// from the deterministic sums of squares of every shard (kernels/reduce.hpp).
#pragma once
#include <algorithm>
#include <cmath>

namespace strata {

// The global L2 norm from the sum of squares over all shards and ranks.
inline double global_norm(double sum_of_squares) { return std::sqrt(sum_of_squares); }

// The factor grads are multiplied by: max_norm / (norm + 1e-6), capped at 1; 1 when
// max_norm <= 0 (no clipping). A non-finite norm gives a non-finite or zero factor, as
// in torch: the caller checks the norm first and skips the step (an overflow).
inline float clip_coefficient(double global_norm, float max_norm) {
  if (!(max_norm > 0.0f)) return 1.0f;
  const double coef = static_cast<double>(max_norm) / (global_norm + 1e-6);
  return static_cast<float>(std::min(coef, 1.0));
}

}  // namespace strata
