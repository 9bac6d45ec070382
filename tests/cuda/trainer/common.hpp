// What the two halves of cuda.trainer share: one environment and grid for the process (inline,
// so both units use the same), the mlp setup, and runs of it on the GPU and the host.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <strata/cuda.cuh>

#include "mlp_run.hpp"

namespace trainer_test {

inline strata::environment& env() {
  static strata::environment e;
  return e;
}

inline strata::grid<strata::world_comm>& grid() {
  static bool selected = (strata::select_device(env().local_rank()), true);
  (void)selected;
  static strata::grid<strata::world_comm> g(env().world(), {});
  return g;
}

inline test::mlp_setup setup() {
  test::mlp_setup s;
  s.steps = 10;
  return s;
}

template <class Sharding, class Precision = strata::fp32>
test::mlp_result on_gpu(const test::mlp_setup& s = setup()) {
  return test::run_mlp<Sharding, strata::adamw, Precision, mlp::model, strata::cuda>(grid(), s,
                                                                                     mlp::make_model(s.shape));
}

// The memory report of a GPU trainer after two steps.
template <class Sharding, class Precision = strata::fp32>
strata::memory_report on_gpu_memory() {
  auto s = setup();
  s.steps = 2;
  return on_gpu<Sharding, Precision>(s).memory;
}

template <class Sharding, class Precision = strata::fp32>
test::mlp_result on_host(const test::mlp_setup& s = setup()) {
  return test::run_mlp<Sharding, strata::adamw, Precision>(grid(), s);
}

// STRATA_TEST_VERBOSE=1 (gpu-check sets it) prints how far the GPU run was from the
// host's, pass or fail, so the first GPU runs confirm (or correct) the bounds below.
inline void report_distance(const char* what, const test::mlp_result& gpu, const test::mlp_result& host) {
  if (!std::getenv("STRATA_TEST_VERBOSE")) return;
  double loss = 0.0;
  for (std::size_t i = 0; i < std::min(gpu.stats.size(), host.stats.size()); ++i)
    loss = std::max(loss, std::abs(static_cast<double>(gpu.stats[i].loss) - host.stats[i].loss) /
                              std::abs(static_cast<double>(host.stats[i].loss)));
  std::printf("%s: the losses differ by at most %.3g relative, the masters by %.3g\n", what, loss,
              test::relative_distance(gpu.master, host.master));
}

}  // namespace trainer_test
