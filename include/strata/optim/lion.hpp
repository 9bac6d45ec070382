// The Lion optimizer policy (sign of an interpolated momentum, decoupled weight decay,
// as lion-pytorch): its hyperparameters and a fused step over one flat shard.
#pragma once
#include "../kernels/lion.hpp"
#include "shard.hpp"

namespace strata {

struct lion {
  float beta1 = 0.9f, beta2 = 0.99f, weight_decay = 0.0f;

  static constexpr int state_slots = 1;  // exp_avg
  static constexpr const char* name = "lion";
  static constexpr bool writes_param_out = true;  // the compute copy, in the same pass

  void validate() const {
    detail::check_beta(name, "beta1", beta1);
    detail::check_beta(name, "beta2", beta2);
    detail::check_nonnegative(name, "weight_decay", weight_decay);
  }

  // One step of the shard; `step` is the 1-based optimizer step (it seeds stochastic
  // rounding only: Lion has no bias correction).
  template <class P, class G>
  void step(const shard_args<P, G>& a, float lr, float grad_scale, bool decay, long step) const {
    detail::step_on_host(*this, a, lr, grad_scale, decay, step);
  }

  // The functor that step runs over a run of the shard, for any driver (host and CUDA).
  template <kernels::write_mode W, class P, class G>
  kernels::lion_update<P, G, W> update(const shard_args<P, G>& a, float lr, float grad_scale, bool decay,
                                       long step) const {
    // Step scalars from the hyperparameters' decimals, as torch would (detail::as_decimal).
    const double b1 = detail::as_decimal(beta1), b2 = detail::as_decimal(beta2);
    const double wd = decay ? detail::as_decimal(weight_decay) : 0.0;
    return {a.master,
            a.grad,
            a.state0,
            a.param_out,
            grad_scale,
            beta1,
            static_cast<float>(1.0 - b1),
            beta2,
            static_cast<float>(1.0 - b2),
            static_cast<float>(1.0 - detail::as_decimal(lr) * wd),
            lr,
            detail::step_rounding_key(a.seed, step),
            a.global_offset};
  }
};

}  // namespace strata
