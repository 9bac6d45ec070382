// --device cuda, as both examples take it: each program's run_cuda(const run_args&) is
// defined in its run_cuda.cu, which selects this process's GPU by local rank and runs in
// strata::cuda. That file is built, with STRATA_EXAMPLE_HAS_CUDA=1, where CUDA is enabled;
// in a build without it run_cuda throws the config_error below (main exits 2).
#pragma once
#include <strata/core/error.hpp>

namespace examples {

[[noreturn]] inline void no_cuda() {
  throw strata::config_error(
      "--device cuda: this build has no CUDA (configure with -DSTRATA_ENABLE_CUDA=ON where nvcc is found)");
}

}  // namespace examples

// Declares `int run_cuda(const Args& a)` in the enclosing namespace (run_cuda.cu defines
// it), or, without CUDA, defines it to throw: `STRATA_EXAMPLE_RUN_CUDA(run_args);`.
#if STRATA_EXAMPLE_HAS_CUDA
#define STRATA_EXAMPLE_RUN_CUDA(Args) int run_cuda(const Args& a)
#else
#define STRATA_EXAMPLE_RUN_CUDA(Args) \
  inline int run_cuda(const Args&) { ::examples::no_cuda(); }
#endif
