// examples/qwen2 --device cuda: the same run in strata::cuda, one GPU per process (chosen
// by local rank), NCCL between processes (gradients, params, the tensor-parallel layers'
// collectives, the pipeline's activations), or MPI with STRATA_DEVICE_COMM=mpi (then
// ranks may share a GPU). Each precision is its own translation unit (run_cuda_<precision>.cu), as
// on the host. Built where nvcc is found.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace qwen2 {

int run_cuda(const run_args& a) {
  strata::select_device(a.env.local_rank());
  if (a.pol.precision == "bf16") return run_cuda_bf16(a);
  if (a.pol.precision == "fp16") return run_cuda_fp16(a);
  return run_cuda_fp32(a);  // main refused any other precision
}

}  // namespace qwen2
