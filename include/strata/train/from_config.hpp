// A DeepSpeed config (io/config.hpp's run_config, plain data) mapped onto what the trainer
// takes: its runtime options, the compile-time policies by dispatch, the optimizer.
#pragma once
#include <type_traits>
#include <utility>

#include "../core/error.hpp"
#include "../io/config.hpp"
#include "../optim/adamw.hpp"
#include "../optim/lion.hpp"
#include "../optim/sgd.hpp"
#include "dispatch.hpp"
#include "options.hpp"

namespace strata {

// The compile-time policy choice the config names (for strata::dispatch).
inline runtime_policies to_runtime_policies(const run_config& c) {
  runtime_policies p;
  p.zero_stage = c.zero_stage;
  p.offload = c.offload_optimizer;
  p.precision = c.precision();
  p.optimizer = c.optimizer;
  return p;
}

// The trainer's runtime options; the batch sizes must be resolved first (resolve()).
inline trainer_options to_trainer_options(const run_config& c) {
  if (!c.batch)
    throw config_error(
        "config: call run_config::resolve(data-parallel size) before to_trainer_options, so that "
        "gradient_accumulation_steps is known");
  trainer_options o;
  o.lr = c.lr;
  o.schedule = c.schedule;
  o.max_grad_norm = c.gradient_clipping;
  o.micro_batches = static_cast<int>(c.batch->gradient_accumulation_steps);
  o.bucket_elems = c.reduce_bucket_size;
  o.seed = c.seed;
  o.loss_scaler = c.loss_scaler;
  o.rounding = c.rounding;
  o.offload_params = c.offload_param;
  o.validate();
  return o;
}

// The hyperparameters of Optimizer (adamw, sgd or lion) from the config, which must
// name that optimizer.
template <class Optimizer>
Optimizer to_optimizer(const run_config& c) {
  if (c.optimizer != Optimizer::name)
    throw config_error(strata::cat("config: optimizer is ", c.optimizer, ", not ", Optimizer::name));
  if constexpr (std::is_same_v<Optimizer, adamw>)
    return c.adamw_params;
  else if constexpr (std::is_same_v<Optimizer, sgd>)
    return c.sgd_params;
  else if constexpr (std::is_same_v<Optimizer, lion>)
    return c.lion_params;
  else
    static_assert(sizeof(Optimizer) == 0, "strata::to_optimizer: no config mapping for this optimizer");
}

// Calls f(type_tag<Sharding>, type_tag<Optimizer>, type_tag<Precision>) for the config.
template <class F>
decltype(auto) dispatch(const run_config& c, F&& f) {
  return dispatch(to_runtime_policies(c), std::forward<F>(f));
}

}  // namespace strata
