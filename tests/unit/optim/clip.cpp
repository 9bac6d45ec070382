// Clipping by global norm as torch.nn.utils.clip_grad_norm_: max_norm / (norm + 1e-6),
// capped at 1, and no clipping for max_norm <= 0.
#include <cmath>

#include "catch.hpp"
#include "strata/optim/clip.hpp"

TEST_CASE("clip coefficient") {
  CHECK(strata::clip_coefficient(10.0, 1.0f) == static_cast<float>(1.0 / (10.0 + 1e-6)));
  CHECK(strata::clip_coefficient(0.5, 1.0f) == 1.0f);    // below the threshold: unchanged
  const float at = strata::clip_coefficient(1.0, 1.0f);  // the 1e-6 guard makes it just below 1
  CHECK((at < 1.0f && at > 0.999998f));
  CHECK(strata::clip_coefficient(0.0, 1.0f) == 1.0f);
  CHECK(strata::clip_coefficient(100.0, 0.0f) == 1.0f);   // disabled
  CHECK(strata::clip_coefficient(100.0, -1.0f) == 1.0f);  // disabled
  CHECK(strata::clip_coefficient(INFINITY, 1.0f) == 0.0f);
  CHECK(std::isnan(strata::clip_coefficient(NAN, 1.0f)));  // as torch: the caller checks the norm and skips
}

TEST_CASE("global norm from a sum of squares") {
  CHECK(strata::global_norm(25.0) == 5.0);
  // The clipped grads have norm max_norm (up to the 1e-6 guard).
  const double norm = strata::global_norm(3.0 * 3.0 + 4.0 * 4.0);
  const float c = strata::clip_coefficient(norm, 2.0f);
  CHECK(std::fabs(std::hypot(3.0 * c, 4.0 * c) - 2.0) < 1e-6);
}
