// --config FILE for the examples: a DeepSpeed ds_config.json decides the policies, the
// optimizer and its hyperparameters, the batch sizes and the schedule; the command line
// keeps the model shape, the steps, the seed and the outputs.
#pragma once
#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <strata/train/from_config.hpp>

#include "args.hpp"

namespace examples {

struct config_choice {
  std::optional<strata::run_config> cfg;
  // The optimizer's hyperparameters: from the config when there is one.
  template <class Optimizer>
  Optimizer optimizer() const {
    return cfg ? strata::to_optimizer<Optimizer>(*cfg) : Optimizer{};
  }
};

// The options a file's "auto" can take from the command line (through config_auto_values).
inline bool option_fills_auto(const std::string& option) {
  for (const char* k : {"lr", "clip", "batch", "micro-batches", "precision"})
    if (option == k) return true;
  return false;
}

// The Trainer's mismatch check, for the options given: each must agree with what the run
// uses, which it does when it filled an "auto" (the program passed its value on in `v`)
// or the file says the same.
inline void check_options_agree(args& a, const std::string& path, const strata::run_config& c,
                                const strata::config_auto_values& v) {
  auto agree = [&](const char* opt, bool passed_on, bool same, const char* key, const auto& file, const auto& cli) {
    if (!a.has(opt) || (passed_on && same)) return;
    if (!passed_on)
      throw strata::config_error(strata::cat("--", opt, " conflicts with --config ", path,
                                             ": the config file decides it (edit the file instead)"));
    throw strata::config_error(strata::cat("--", opt, " ", cli, " conflicts with --config ", path, ", whose ", key,
                                           " is ", file, " (write \"auto\" there to take --", opt, ")"));
  };
  const float lr = static_cast<float>(v.lr.value_or(0.0));
  agree("lr", v.lr.has_value(), c.lr == lr, "optimizer.params.lr", c.lr, lr);
  if (c.scheduler == "WarmupLR" || c.scheduler == "WarmupDecayLR")
    agree("lr", v.lr.has_value(), static_cast<float>(c.schedule.warmup_max_lr) == lr, "scheduler.params.warmup_max_lr",
          c.schedule.warmup_max_lr, lr);
  const float clip = static_cast<float>(v.max_grad_norm);
  agree("clip", true, c.gradient_clipping == clip, "gradient_clipping", c.gradient_clipping, clip);
  const auto& b = *c.batch;
  agree("batch", v.train_batch_size.has_value(), b.train_batch_size == v.train_batch_size.value_or(0),
        "train_batch_size", b.train_batch_size, v.train_batch_size.value_or(0));
  agree("micro-batches", v.gradient_accumulation_steps.has_value(),
        b.gradient_accumulation_steps == v.gradient_accumulation_steps.value_or(0), "gradient_accumulation_steps",
        b.gradient_accumulation_steps, v.gradient_accumulation_steps.value_or(0));
  agree("precision", true, c.precision() == v.precision, "precision (fp16.enabled, bf16.enabled)", c.precision(),
        v.precision);
  // The Trainer's own optimizer and warmup where the file has none (config_auto.hpp);
  // otherwise the file's, which the options must then agree with.
  if (c.optimizer == "adamw") {
    const float wd = static_cast<float>(v.weight_decay);
    agree("weight-decay", true, c.adamw_params.weight_decay == wd, "optimizer.params.weight_decay",
          c.adamw_params.weight_decay, wd);
  }
  // A scheduler's warmup of 0 reads as 1 (DeepSpeed warms up over max(2, N) steps either way).
  const long warmup = c.scheduler.empty() ? 0 : c.schedule.warmup_num_steps;
  const long want = c.scheduler.empty() ? v.warmup_steps : std::max(1L, v.warmup_steps);
  agree("warmup", true, warmup == want, "scheduler.params.warmup_num_steps", warmup, v.warmup_steps);
}

// Reads --config when given and fills the policies, options and global batch from it.
// Options the config decides may not also be given on the command line. `grid_sizes`
// (tensor, pipeline) take the config's strata section; without it (a data-parallel-only
// program) the config must not ask for tensor or pipeline parallelism. `autos` (what the
// command line and the model say, in the Hugging Face Trainer's terms) fill the file's
// "auto" values first; then --lr, --clip, --batch, --micro-batches and --precision may be
// given (the program passes their values on in `autos`) as long as the run uses what
// they say: they filled an "auto", or the file gives the same value.
inline config_choice apply_config(args& a, const char* program, int rank, int world_size, strata::runtime_policies& pol,
                                  strata::trainer_options& opts, long& global_batch, int* tp = nullptr,
                                  int* pp = nullptr, const strata::config_auto_values* autos = nullptr) {
  config_choice c;
  const std::string path = a.str("config", "");
  if (path.empty()) return c;
  for (const char* k : {"zero", "offload", "offload-param", "precision", "optimizer", "lr", "clip", "batch",
                        "micro-batches", "bucket", "schedule", "tp", "pp"})
    if (a.has(k) && !(autos && option_fills_auto(k)))
      throw strata::config_error(std::string("--") + k + " conflicts with --config " + path +
                                 ": the config file decides it (edit the file instead)");
  c.cfg = strata::load_config(path, autos);
  if (auto w = strata::unknown_keys_warning(*c.cfg); !w.empty() && rank == 0)
    std::fprintf(stderr, "%s: warning: %s\n", program, w.c_str());
  if (auto n = strata::no_effect_keys_note(*c.cfg); !n.empty() && rank == 0)
    std::printf("%s: %s\n", program, n.c_str());
#if !STRATA_EXAMPLE_CUDA_BINARY
  // A GPU trainer offloads the param shard (trainer_options::offload_params); the host has nothing to move.
  if (auto n = strata::offload_param_note(*c.cfg); !n.empty() && rank == 0) std::printf("%s: %s\n", program, n.c_str());
#endif
  const int t = c.cfg->tensor_parallel_size, p = c.cfg->pipeline_parallel_size;
  if (!tp || !pp)
    strata::expects<strata::config_error>(t == 1 && p == 1, [&] {
      return std::string(program) + " is data parallel only: the config's tensor/pipeline sizes must be 1";
    });
  else
    *tp = t, *pp = p;
  // In 64 bits: the file may give each size up to INT_MAX, whose int product wraps (to 0 for
  // 65536 x 65536).
  const long grid = static_cast<long>(t) * p;
  strata::expects<strata::config_error>(grid <= world_size && world_size % grid == 0, [&] {
    return "config: tensor x pipeline = " + std::to_string(t) + " x " + std::to_string(p) + " does not divide " +
           std::to_string(world_size) + " processes";
  });
  c.cfg->resolve(static_cast<int>(world_size / grid));
  if (autos) check_options_agree(a, path, *c.cfg, *autos);
  pol = strata::to_runtime_policies(*c.cfg);
  pol.schedule = c.cfg->pipeline_schedule;
  const auto seed = opts.seed;
  // strata.seed 0 (or none) leaves the seed to the command line, and the printed config
  // then shows the one the run uses; a nonzero one and a different --seed conflict.
  strata::expects<strata::config_error>(!c.cfg->seed || !a.has("seed") || c.cfg->seed == seed, [&] {
    return strata::cat("--seed ", seed, " conflicts with --config ", path, ", whose strata.seed is ", c.cfg->seed,
                       " (set it to 0 there to take --seed)");
  });
  if (!c.cfg->seed) c.cfg->seed = seed;
  opts = strata::to_trainer_options(*c.cfg);
  global_batch = c.cfg->batch->train_batch_size;
  return c;
}

// On rank 0, prints the config the run uses (strata::resolved_config_json, one line) and
// the keys whose "auto" the program filled; nothing without --config.
inline void print_resolved_config(const config_choice& c, const char* program, int rank, std::FILE* out = stdout) {
  if (!c.cfg || rank != 0) return;
  std::fprintf(out, "%s: config: %s\n", program, strata::resolved_config_json(*c.cfg).dump().c_str());
  if (c.cfg->auto_filled.empty()) return;
  std::string keys;
  for (const auto& k : c.cfg->auto_filled) keys += (keys.empty() ? "" : ", ") + k;
  std::fprintf(out, "%s: config: \"auto\" filled by the program: %s\n", program, keys.c_str());
}

}  // namespace examples
