// examples/gpt --device cuda: the same run in strata::cuda, one GPU per process (chosen
// by local rank), NCCL between processes (gradients, params, the tensor-parallel layers'
// collectives and the pipeline's activations), or MPI with STRATA_DEVICE_COMM=mpi (then
// ranks may share a GPU). Built where nvcc is found.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace gpt {

int run_cuda(const run_args& a) {
  strata::select_device(a.env.local_rank());
  return strata::dispatch_sharding_schedule(a.pol, [&](auto s, auto sc) {
    return run<strata::cuda, typename decltype(s)::type, typename decltype(sc)::type>(a);
  });
}

}  // namespace gpt
