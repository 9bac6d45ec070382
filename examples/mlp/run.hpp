// examples/mlp: one training run in a space under fixed policies, shared by the host
// build (main.cpp) and the CUDA translation unit (run_cuda*.cu).
#pragma once
#include <cstdio>
#include <strata/strata.hpp>

#include "../common/args.hpp"
#include "../common/config.hpp"
#include "../common/device.hpp"
#include "../common/loop.hpp"
#include "model.hpp"

namespace mlp {

struct run_args {
  strata::environment& env;
  const shape_config& shape;
  const examples::loop_options& lo;
  const strata::trainer_options& opts;
  const examples::config_choice& cc;
  const strata::runtime_policies& pol;
};

template <class Space, class Sharding, class Optimizer, class Precision>
int run(const run_args& a) {
  strata::grid g(a.env.world(), {});
  const int ranks = g.dp_size(), rank = g.dp_rank();
  a.lo.validate(ranks, a.opts.micro_batches);
  const std::size_t base_rss = strata::resident_bytes();  // before the trainer exists
  strata::trainer<model, Space, Sharding, Optimizer, Precision> tr(g, make_model(a.shape), a.opts,
                                                                   a.cc.template optimizer<Optimizer>());
  synthetic_data data(a.shape, a.lo.seed);
  const long local = a.lo.batch / ranks;
  const auto r =
      examples::train_loop(tr, a.lo, a.env.rank(), strata::train_flops_per_token(examples::full_param_count(tr)),
                           [&](long step, strata::batch<>& b) {
                             data.fill(static_cast<std::uint64_t>(step * a.lo.batch + rank * local), local, b);
                           });
  auto per_rank = examples::memory_per_rank(tr, a.env.world(), 0, base_rss);
  if (rank == 0) {
    std::printf("final loss %s  weights_hash %s  policy %s/%s/%s  device %s  ranks %d  params %zu\n",
                r.final_loss_text().c_str(), r.hash.c_str(), Sharding::name, Optimizer::name, Precision::name,
                Space::name, ranks, r.params);
    auto j = examples::base_report(tr, r, std::move(per_rank));
    j["policy"] = {{"sharding", Sharding::name}, {"optimizer", Optimizer::name}, {"precision", Precision::name}};
    j["ranks"] = ranks;
    examples::write_report(a.lo.report, j);
  }
  return 0;
}

// --device cuda: run in strata::cuda, by run_cuda.cu in the X-cuda executable (see
// examples/common/device.hpp).
int run_cuda(const run_args& a);
int run_cuda_fp32(const run_args& a);
int run_cuda_bf16(const run_args& a);
int run_cuda_fp16(const run_args& a);

}  // namespace mlp
