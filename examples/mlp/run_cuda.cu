// examples/mlp --device cuda (the mlp-cuda executable): the same run in strata::cuda, one
// GPU per process (chosen by local rank), NCCL between processes. Each precision is its
// own translation unit (run_cuda_<precision>.cu), so nvcc compiles the 63 trainers in
// parallel. Built where nvcc is found.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace mlp {

int run_cuda(const run_args& a) {
  strata::select_device(a.env.local_rank());
  if (a.pol.precision == "bf16") return run_cuda_bf16(a);
  if (a.pol.precision == "fp16") return run_cuda_fp16(a);
  strata::expects<strata::config_error>(a.pol.precision == "fp32", [&] {
    return strata::cat("--precision ", a.pol.precision, " is not one of fp32, bf16, fp16");
  });
  return run_cuda_fp32(a);
}

}  // namespace mlp
