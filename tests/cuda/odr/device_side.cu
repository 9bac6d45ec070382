// strata-gpu: any
// The nvcc half of the ODR test: the whole library, the CUDA space, the NCCL communicator
// and the CUDA kernels in one translation unit, compiled for the device architectures.
#include <strata/comm/nccl.hpp>
#include <strata/kernels/cuda_reduce.cuh>
#include <strata/optim/cuda_optim.cuh>
#include <strata/space/cuda.hpp>
#include <strata/strata.hpp>

#include "facts.hpp"

// Instantiating the drivers makes nvcc compile the functors for the device: a header that
// defined something differently under __CUDACC__ would show in the layouts below.
template void strata::step_runs_cuda<strata::adamw, strata::bf16, float>(const strata::adamw&,
                                                                         const strata::shard_args<strata::bf16, float>&,
                                                                         const strata::cuda_run_table&, float, float,
                                                                         long, cudaStream_t);
template class strata::kernels::cuda_reducer<float>;

odr::facts odr::from_cuda_tu() {
  facts f;
  STRATA_ODR_FACTS(f);
  return f;
}
