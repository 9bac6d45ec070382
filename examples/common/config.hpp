// --config FILE for the examples: a DeepSpeed ds_config.json decides the policies, the
// optimizer and its hyperparameters, the batch sizes and the schedule; the command line
// keeps the model shape, the steps, the seed and the outputs.
#pragma once
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

// Reads --config when given and fills the policies, options and global batch from it.
// Options the config decides may not also be given on the command line. `grid_sizes`
// (tensor, pipeline) take the config's strata section; without it (a data-parallel-only
// program) the config must not ask for tensor or pipeline parallelism.
inline config_choice apply_config(args& a, const char* program, int rank, int world_size, strata::runtime_policies& pol,
                                  strata::trainer_options& opts, long& global_batch, int* tp = nullptr,
                                  int* pp = nullptr) {
  config_choice c;
  const std::string path = a.str("config", "");
  if (path.empty()) return c;
  for (const char* k : {"zero", "offload", "precision", "optimizer", "lr", "clip", "batch", "micro-batches", "bucket",
                        "schedule", "tp", "pp"})
    if (a.has(k))
      throw strata::config_error(std::string("--") + k + " conflicts with --config " + path +
                                 ": the config file decides it (edit the file instead)");
  c.cfg = strata::load_config(path);
  if (auto w = strata::unknown_keys_warning(*c.cfg); !w.empty() && rank == 0)
    std::fprintf(stderr, "%s: warning: %s\n", program, w.c_str());
  const int t = c.cfg->tensor_parallel_size, p = c.cfg->pipeline_parallel_size;
  if (!tp || !pp)
    strata::expects<strata::config_error>(t == 1 && p == 1, [&] {
      return std::string(program) + " is data parallel only: the config's tensor/pipeline sizes must be 1";
    });
  else
    *tp = t, *pp = p;
  strata::expects<strata::config_error>(world_size % (t * p) == 0, [&] {
    return "config: tensor x pipeline = " + std::to_string(t) + " x " + std::to_string(p) + " does not divide " +
           std::to_string(world_size) + " processes";
  });
  c.cfg->resolve(world_size / (t * p));
  pol = strata::to_runtime_policies(*c.cfg);
  pol.schedule = c.cfg->pipeline_schedule;
  const auto seed = opts.seed;
  opts = strata::to_trainer_options(*c.cfg);
  if (!c.cfg->seed) opts.seed = seed;
  global_batch = c.cfg->batch->train_batch_size;
  return c;
}

}  // namespace examples
