// The SGD optimizer policy (torch.optim.SGD semantics: L2 weight decay, momentum with
// dampening, nesterov): its hyperparameters and a fused step over one flat shard.
#pragma once
#include "../kernels/host_driver.hpp"
#include "../kernels/sgd.hpp"
#include "shard.hpp"

namespace strata {

struct sgd {
  float momentum = 0, dampening = 0;
  bool nesterov = false;
  float weight_decay = 0;

  static constexpr int state_slots = 1;  // the momentum buffer (untouched when momentum == 0)
  static constexpr const char* name = "sgd";
  static constexpr bool writes_param_out = true;  // the compute copy, in the same pass

  void validate() const {
    detail::check_nonnegative(name, "momentum", momentum);
    detail::check_nonnegative(name, "dampening", dampening);
    detail::check_nonnegative(name, "weight_decay", weight_decay);
    expects<config_error>(!nesterov || (momentum > 0.0f && dampening == 0.0f),
                          "sgd: nesterov momentum needs momentum > 0 and dampening == 0");
  }

  // One step of the shard; `step` is the 1-based optimizer step (the momentum buffer is
  // initialised to the first step's gradient, as torch does when it has none).
  template <class P, class G>
  void step(const shard_args<P, G>& a, float lr, float grad_scale, bool decay, long step) const {
    validate();
    detail::check_step(name, a, momentum != 0.0f ? 1 : 0, lr, grad_scale, step);
    if (a.n == 0) return;
    detail::with_write_mode(a, [&](auto mode) {
      auto run = [&](auto has_momentum) {
        kernels::run_host(a.n,
                          update<decltype(mode)::value, decltype(has_momentum)::value>(a, lr, grad_scale, decay, step));
      };
      if (momentum != 0.0f)
        run(std::true_type{});
      else
        run(std::false_type{});
    });
  }

  // The functor that step runs over a run of the shard, for any driver (host and CUDA);
  // Momentum must be momentum != 0.
  template <kernels::write_mode W, bool Momentum, class P, class G>
  kernels::sgd_update<P, G, W, Momentum> update(const shard_args<P, G>& a, float lr, float grad_scale, bool decay,
                                                long step) const {
    return {a.master,
            a.grad,
            a.state0,
            a.param_out,
            grad_scale,
            decay ? weight_decay : 0.0f,
            lr,
            momentum,
            static_cast<float>(1.0 - detail::as_decimal(dampening)),
            nesterov,
            step == 1,
            detail::step_rounding_key(a.seed, step),
            a.global_offset};
  }
};

}  // namespace strata
