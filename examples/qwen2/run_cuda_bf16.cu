// examples/qwen2 in strata::cuda in bf16: its own translation unit, built in parallel with the others.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace qwen2 {

int run_cuda_bf16(const run_args& a) { return dispatch_run<strata::cuda, strata::mixed<strata::bf16>>(a); }

}  // namespace qwen2
