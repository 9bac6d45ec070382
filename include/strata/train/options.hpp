// trainer_options: the runtime settings of a trainer (what DeepSpeed's JSON holds);
// the compile-time choices are the trainer's policies.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../kernels/rounding.hpp"
#include "../optim/loss_scaler.hpp"
#include "../optim/schedule.hpp"
#include "../parallel/bucket_plan.hpp"

namespace strata {

struct trainer_options {
  float lr = 1e-3f;  // used when schedule is left at its default
  lr_schedule schedule = lr_schedule::constant(1e-3);
  float max_grad_norm = 0.0f;                       // gradient_clipping; 0 = none
  int micro_batches = 1;                            // gradient_accumulation_steps
  std::size_t bucket_elems = default_bucket_elems;  // reduce_bucket_size (elements)
  std::uint64_t seed = 0;                           // weight initialisation and stochastic rounding
  loss_scaler_options loss_scaler{};                // fp16 only
  strata::rounding rounding = strata::rounding::nearest_even;
  // Pipeline stages as layer indices: stage s runs layers [cuts[s], cuts[s+1]). Empty:
  // balanced by parameter count.
  std::vector<std::size_t> pipeline_cuts;
  // Activation recomputation (Hugging Face's gradient_checkpointing, Megatron's full
  // recompute): the layers named here ("layers" for every layers.N, or "layers.3") keep
  // only their input between forward and backward and run forward again just before
  // their backward. Memory falls to one layer's cache; the weights stay the same bits.
  std::vector<std::string> recompute;
  // ZeRO-3 parameter offload (DeepSpeed's zero_optimization.offload_param, device "cpu"):
  // a GPU trainer keeps its param shard in pinned host memory and copies each piece up
  // inside the all-gather that needs it (prefetched as gathers are). On the host the
  // params already live in host memory, so nothing changes there. ZeRO-3 only.
  bool offload_params = false;
  // Where each step's time goes (train/step_profile.hpp): the step's timeline split into
  // each layer kind's forward and backward, the gradient norm, the optimizer, the waits
  // and the rest, on the space's clock (CUDA events on a GPU), and host communication's
  // busy time by kind; read it after a step with trainer::last_profile(). Costs a clock
  // read or an event record at each layer's start and end.
  bool profile = false;
  // A step whose gradients are not finite is skipped. At a static loss scale (fp32, bf16,
  // a fixed fp16 loss_scale) nothing changes from one step to the next that could make
  // them finite again, so after this many skipped steps in a row the step throws a
  // strata::error saying what went wrong (the loss too, or only the gradients) instead
  // of training on for nothing. 0: skip for ever. A dynamic fp16 scale stops at its
  // minimum instead (loss_scaler_options::raise_error_at_min_scale), as DeepSpeed's does.
  int max_consecutive_skips = 5;

  void validate() const {
    expects<config_error>(micro_batches >= 1,
                          strata::cat("micro_batches (gradient_accumulation_steps) must be >= 1, got ", micro_batches));
    expects<config_error>(std::isfinite(lr) && lr >= 0.0f, strata::cat("lr must be finite and >= 0, got ", lr));
    expects<config_error>(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0f,
                          strata::cat("max_grad_norm (gradient_clipping) must be >= 0, got ", max_grad_norm));
    expects<config_error>(bucket_elems >= 1, "bucket_elems (reduce_bucket_size) must be >= 1");
    expects<config_error>(
        max_consecutive_skips >= 0,
        strata::cat("max_consecutive_skips must be >= 0 (0: never stop), got ", max_consecutive_skips));
    schedule.validate();
  }
};

}  // namespace strata
