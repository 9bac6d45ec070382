// examples/gpt --device cuda: the same run in strata::cuda, one GPU per process (chosen
// by local rank), NCCL between processes (gradients, params, and the tensor-parallel
// layers' collectives). Built where nvcc is found.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace gpt {

int run_cuda(const run_args& a) {
  // The CUDA trainer refuses pipeline parallelism with a config_error before it touches
  // a GPU; choosing the device only for a layout it accepts lets that message, not a
  // missing device's, reach the user on any machine.
  if (a.pp == 1) strata::select_device(a.env.local_rank());
  return strata::dispatch_sharding_schedule(a.pol, [&](auto s, auto sc) {
    return run<strata::cuda, typename decltype(s)::type, typename decltype(sc)::type>(a);
  });
}

}  // namespace gpt
