// examples/gpt: one training run in a space under a fixed sharding and pipeline schedule,
// shared by the host build (main.cpp) and the CUDA translation unit (run_cuda.cu).
#pragma once
#include <cstdio>
#include <span>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "../common/device.hpp"
#include "../common/loop.hpp"
#include "model.hpp"

namespace gpt {

struct run_args {
  strata::environment& env;
  const config& model;
  int tp, pp;
  const examples::loop_options& lo;
  const strata::trainer_options& opts;
  const examples::config_choice& cc;
  const strata::runtime_policies& pol;
};

template <class Space, class Sharding, class Schedule>
int run(const run_args& a) {
  strata::grid g(a.env.world(), {.tensor = a.tp, .pipeline = a.pp});
  const int dp = g.dp_size();
  a.lo.validate(dp, a.opts.micro_batches);
  const std::size_t base_rss = strata::resident_bytes();  // before the trainer exists
  strata::trainer<model, Space, Sharding, strata::adamw, strata::fp32, Schedule> tr(
      g, make_model(a.model, g.tp_rank(), g.tp_size()), a.opts, a.cc.template optimizer<strata::adamw>());
  synthetic_tokens data(a.model, a.lo.seed);
  const long local = a.lo.batch / dp;
  const auto r = examples::train_loop(
      tr, a.lo, a.env.rank(),
      a.model.seq * strata::train_flops_per_token(examples::full_param_count(tr) - lookup_params(a.model),
                                                  a.model.layers, a.model.dim, a.model.seq),
      [&](long step, strata::batch<>& b) {
        data.fill(static_cast<std::uint64_t>(step * a.lo.batch + g.dp_rank() * local), local, b);
      });
  // The pipeline's idle fraction, averaged over ranks.
  double fraction = r.step_seconds > 0 ? r.idle_seconds / r.step_seconds : 0;
  a.env.world().all_reduce(std::span<double>(&fraction, 1), strata::reduce_op::avg);
  auto per_rank = examples::memory_per_rank(tr, a.env.world(), g.pp_rank(), base_rss);
  if (a.env.rank() == 0) {
    std::printf("final loss %s  weights_hash %s  tp %d dp %d pp %d  %s/%s  idle %.3f  params %zu  device %s\n",
                r.final_loss_text().c_str(), r.hash.c_str(), a.tp, dp, a.pp, Sharding::name, Schedule::name, fraction,
                r.params, Space::name);
    auto j = examples::base_report(tr, r, std::move(per_rank));
    j["pipeline_idle_fraction"] = fraction;
    j["layout"] = {{"tp", a.tp}, {"dp", dp}, {"pp", a.pp}, {"zero", Sharding::name}, {"schedule", Schedule::name}};
    examples::write_report(a.lo.report, j);
  }
  return 0;
}

// --device cuda: run in strata::cuda, by run_cuda.cu in the X-cuda executable (see
// examples/common/device.hpp).
int run_cuda(const run_args& a);

}  // namespace gpt
