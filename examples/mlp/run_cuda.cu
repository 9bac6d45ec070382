// examples/mlp --device cuda: the same run in strata::cuda, one GPU per process (chosen
// by local rank), NCCL between processes. Built where nvcc is found.
#include <strata/cuda.cuh>

#include "run.hpp"

namespace mlp {

int run_cuda(const run_args& a) {
  strata::select_device(a.env.local_rank());
  return strata::dispatch(a.pol, [&](auto s, auto o, auto p) {
    return run<strata::cuda, typename decltype(s)::type, typename decltype(o)::type, typename decltype(p)::type>(a);
  });
}

}  // namespace mlp
