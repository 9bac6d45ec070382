// Test support: trains the examples/mlp model for a few steps under given policies and
// returns what tests compare (weights, hash, per-step statistics, memory report).
#pragma once
#include <cmath>
#include <strata/strata.hpp>
#include <vector>

#include "../../examples/mlp/model.hpp"
#include "relative_distance.hpp"

namespace test {

struct mlp_result {
  std::vector<float> master;
  std::uint64_t hash = 0;
  std::vector<strata::step_stats> stats;
  strata::memory_report memory;
  std::vector<long> skipped;
};

struct mlp_setup {
  mlp::shape_config shape{16, 32, 3, 5};
  long steps = 5;
  long global_batch = 32;  // rows per step over all data-parallel ranks
  std::uint64_t seed = 7;
  strata::trainer_options opts = [] {
    strata::trainer_options o;
    o.lr = 3e-3f;
    o.schedule = strata::lr_schedule::constant(3e-3);
    o.bucket_elems = 700;  // several buckets for this small model, so the overlap paths run
    o.seed = 7;
    return o;
  }();
};

template <class Sharding, class Optimizer = strata::adamw, class Precision = strata::fp32, class Model = mlp::model,
          class Space = strata::host>
mlp_result run_mlp(strata::grid<strata::world_comm>& g, const mlp_setup& s, Model model) {
  strata::trainer<Model, Space, Sharding, Optimizer, Precision> tr(g, std::move(model), s.opts);
  mlp::synthetic_data data(s.shape, s.seed);
  const long local = s.global_batch / g.dp_size();
  strata::batch<> b;
  mlp_result r;
  for (long step = 0; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    r.stats.push_back(tr.step(b));
  }
  r.master = tr.gather_master();
  r.hash = strata::weights_hash(r.master);
  r.memory = tr.memory();
  r.skipped = tr.skipped_steps();
  return r;
}

template <class Sharding, class Optimizer = strata::adamw, class Precision = strata::fp32>
mlp_result run_mlp(strata::grid<strata::world_comm>& g, const mlp_setup& s) {
  return run_mlp<Sharding, Optimizer, Precision>(g, s, mlp::make_model(s.shape));
}

}  // namespace test
