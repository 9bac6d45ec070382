// main() for CUDA tests. A test that needs a GPU exits 77 (ctest: skipped) on a machine
// without one, so that it never reports it as passed, and fails on a machine whose GPU
// cannot be used (strata::probe_cuda) or, with STRATA_REQUIRE_GPU=1, on one without; a test
// of the no-GPU behaviour exits 77 where a GPU is present. STRATA_TEST_GPU is 1 or 0, set
// by the build. With STRATA_TEST_MPI=1 (a test of several ranks, started by mpiexec) MPI is
// started first and the test fails when any rank fails (MAX over ranks), as in mpi_main.cpp.
#include <cstdio>
#include <strata/space/cuda.hpp>

#include "catch_session.hpp"
#if STRATA_TEST_MPI
#include <mpi.h>

#include <strata/comm/environment.hpp>
#endif

namespace {
int run_tests(int argc, char** argv) {
  const strata::cuda_probe gpu = strata::probe_cuda();
#if STRATA_TEST_GPU
  if (!gpu.usable) {
    // Only a machine without a GPU skips; a broken one (an old driver) fails, and with
    // STRATA_REQUIRE_GPU=1 (scripts/gpu-check) so does a missing one.
    const bool skip = gpu.absent && !strata::gpu_required();
    std::printf("%s: no usable CUDA device (%s)%s\n", skip ? "SKIPPED" : "FAILED", gpu.reason.c_str(),
                skip         ? "; this test runs on a machine with a GPU"
                : gpu.absent ? "; STRATA_REQUIRE_GPU=1 says this machine must have one"
                             : "; the machine has a GPU that this build cannot use");
    return skip ? 77 : 1;
  }
#else
  if (gpu.usable) {
    std::printf("SKIPPED: this test checks the behaviour without a GPU, and %d device(s) are present\n", gpu.devices);
    return 77;
  }
#endif
  return strata_test::run_catch_session(argc, argv);
}
}  // namespace

int main(int argc, char** argv) {
#if STRATA_TEST_MPI
  strata::environment env(argc, argv);
  const int result = run_tests(argc, argv);
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (env.rank() == 0 && worst != 0 && result == 0)
    std::printf("a test failed on another rank (see its output above)\n");
  return worst;
#else
  return run_tests(argc, argv);
#endif
}
