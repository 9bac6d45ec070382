// The optimizer policies (adamw, sgd, lion) on the CUDA driver: the same update functors
// and step scalars as their host step(), over a shard's decay runs in one launch.
#pragma once
#include <cmath>
#include <type_traits>

#include "../optim/adamw.hpp"
#include "../optim/lion.hpp"
#include "../optim/sgd.hpp"
#include "adamw.hpp"
#include "cuda_driver.cuh"
#include "lion.hpp"
#include "sgd.hpp"

namespace strata::kernels {

namespace detail {

// Each make_update below builds the functor that the policy's host step() builds, from
// the same double-precision scalars (optim/adamw.hpp explains them); tests/cuda holds the
// two drivers to the same bits. `emit(decayed, undecayed)` receives the functors of a
// decay run and of an undecayed run; they differ only in the decay term.

template <write_mode W, class P, class G, class Emit>
void make_update(const adamw& o, const shard_args<P, G>& a, float lr, float grad_scale, long step, Emit&& emit) {
  const double b1 = strata::detail::as_decimal(o.beta1), b2 = strata::detail::as_decimal(o.beta2);
  const double lr_d = strata::detail::as_decimal(lr);
  const double t = static_cast<double>(step);
  const double bc1 = o.bias_correction ? 1.0 - std::pow(b1, t) : 1.0;
  const double bc2 = o.bias_correction ? 1.0 - std::pow(b2, t) : 1.0;
  auto make = [&](bool decay) {
    const double wd = decay ? strata::detail::as_decimal(o.weight_decay) : 0.0;
    return adamw_update<P, G, W>{a.master,
                                 a.grad,
                                 a.state0,
                                 a.state1,
                                 a.param_out,
                                 grad_scale,
                                 o.beta1,
                                 static_cast<float>(1.0 - b1),
                                 o.beta2,
                                 static_cast<float>(1.0 - b2),
                                 static_cast<float>(1.0 - lr_d * wd),
                                 static_cast<float>(lr_d / bc1),
                                 static_cast<float>(1.0 / std::sqrt(bc2)),
                                 o.eps,
                                 strata::detail::step_rounding_key(a.seed, step),
                                 a.global_offset};
  };
  emit(make(true), make(false));
}

template <write_mode W, class P, class G, class Emit>
void make_update(const sgd& o, const shard_args<P, G>& a, float lr, float grad_scale, long step, Emit&& emit) {
  auto with = [&](auto has_momentum) {
    auto make = [&](bool decay) {
      return sgd_update<P, G, W, decltype(has_momentum)::value>{
          a.master,
          a.grad,
          a.state0,
          a.param_out,
          grad_scale,
          decay ? o.weight_decay : 0.0f,
          lr,
          o.momentum,
          static_cast<float>(1.0 - strata::detail::as_decimal(o.dampening)),
          o.nesterov,
          step == 1,
          strata::detail::step_rounding_key(a.seed, step),
          a.global_offset};
    };
    emit(make(true), make(false));
  };
  if (o.momentum != 0.0f)
    with(std::true_type{});
  else
    with(std::false_type{});
}

template <write_mode W, class P, class G, class Emit>
void make_update(const lion& o, const shard_args<P, G>& a, float lr, float grad_scale, long step, Emit&& emit) {
  const double b1 = strata::detail::as_decimal(o.beta1), b2 = strata::detail::as_decimal(o.beta2);
  auto make = [&](bool decay) {
    const double wd = decay ? strata::detail::as_decimal(o.weight_decay) : 0.0;
    return lion_update<P, G, W>{a.master,
                                a.grad,
                                a.state0,
                                a.param_out,
                                grad_scale,
                                o.beta1,
                                static_cast<float>(1.0 - b1),
                                o.beta2,
                                static_cast<float>(1.0 - b2),
                                static_cast<float>(1.0 - strata::detail::as_decimal(lr) * wd),
                                lr,
                                strata::detail::step_rounding_key(a.seed, step),
                                a.global_offset};
  };
  emit(make(true), make(false));
}

// The state buffers a step reads, as the host step() checks them.
inline int slots_used(const adamw&) { return adamw::state_slots; }
inline int slots_used(const sgd& o) { return o.momentum != 0.0f ? 1 : 0; }
inline int slots_used(const lion&) { return lion::state_slots; }

}  // namespace detail

// One optimizer step of a shard on the device: what step_runs(opt, a, runs, ...) does on
// the host, with the shard's pointers in device memory and the runs in `table`. Queued
// on `stream`; the host returns at once. Bad arguments throw before anything is queued.
template <class O, class P, class G>
void step_runs_cuda(const O& opt, const shard_args<P, G>& a, const cuda_run_table& table, float lr, float grad_scale,
                    long step, cudaStream_t stream) {
  opt.validate();
  strata::detail::check_step(O::name, a, detail::slots_used(opt), lr, grad_scale, step);
  expects<config_error>(table.shard_size() == a.n, [&] {
    return strata::detail::cat(O::name, ": the run table was built for a shard of ", table.shard_size(),
                               " elements, the shard has ", a.n);
  });
  if (a.n == 0) return;
  strata::detail::with_write_mode(a, [&](auto mode) {
    detail::make_update<decltype(mode)::value>(opt, a, lr, grad_scale, step, [&](const auto& decayed, const auto& undecayed) {
      run_cuda_runs(table, decayed, undecayed, stream);
    });
  });
}

}  // namespace strata::kernels
