// examples/mlp --device cuda in fp32: every sharding and optimizer (see run_cuda.cu).
#include <strata/cuda.cuh>

#include "run.hpp"

namespace mlp {

int run_cuda_fp32(const run_args& a) {
  return strata::dispatch_sharding_optimizer(a.pol, [&](auto s, auto o) {
    return run<strata::cuda, typename decltype(s)::type, typename decltype(o)::type, strata::fp32>(a);
  });
}

}  // namespace mlp
