// The AdamW optimizer policy (torch.optim.AdamW semantics): its hyperparameters, and a
// step over one flat shard with the fused adamw_update functor on the host driver.
#pragma once
#include <cmath>

#include "../kernels/adamw.hpp"
#include "shard.hpp"

namespace strata {

struct adamw {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0.01f;
  bool bias_correction = true;

  static constexpr int state_slots = 2;  // exp_avg, exp_avg_sq
  static constexpr const char* name = "adamw";
  static constexpr bool writes_param_out = true;  // the compute copy, in the same pass

  void validate() const {
    detail::check_beta(name, "beta1", beta1);
    detail::check_beta(name, "beta2", beta2);
    detail::check_nonnegative(name, "eps", eps);
    detail::check_nonnegative(name, "weight_decay", weight_decay);
  }

  // One step of the shard. `step` is t, the 1-based count of optimizer steps including
  // this one (torch's state['step'] after its increment); `decay` says whether this run
  // of params takes weight decay; grad_scale multiplies every grad first.
  template <class P, class G>
  void step(const shard_args<P, G>& a, float lr, float grad_scale, bool decay, long step) const {
    detail::step_on_host(*this, a, lr, grad_scale, decay, step);
  }

  // The functor that step runs over a run of the shard, for any driver: the host's
  // (step above) and the CUDA one (optim/cuda_optim.cuh) run this same functor.
  template <kernels::write_mode W, class P, class G>
  kernels::adamw_update<P, G, W> update(const shard_args<P, G>& a, float lr, float grad_scale, bool decay,
                                        long step) const {
    // Scalars in double from the hyperparameters' decimals, as torch computes them in
    // Python, then rounded once to float (detail::as_decimal).
    const double b1 = detail::as_decimal(beta1), b2 = detail::as_decimal(beta2);
    const double lr_d = detail::as_decimal(lr);
    const double t = static_cast<double>(step);
    const double bc1 = bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
    const double bc2 = bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
    const double wd = decay ? detail::as_decimal(weight_decay) : 0.0;
    return {a.master,
            a.grad,
            a.state0,
            a.state1,
            a.param_out,
            grad_scale,
            beta1,
            static_cast<float>(1.0 - b1),
            beta2,
            static_cast<float>(1.0 - b2),
            static_cast<float>(1.0 - lr_d * wd),
            static_cast<float>(lr_d / bc1),
            static_cast<float>(1.0 / std::sqrt(bc2)),
            eps,
            detail::step_rounding_key(a.seed, step),
            a.global_offset};
  }
};

}  // namespace strata
