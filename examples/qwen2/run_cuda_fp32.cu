// examples/qwen2 in strata::cuda in fp32: its own translation unit, built in parallel with the others.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace qwen2 {

int run_cuda_fp32(const run_args& a) { return dispatch_run<strata::cuda, strata::fp32>(a); }

}  // namespace qwen2
