// main() for CUDA tests. A test that needs a GPU exits 77 (ctest: skipped) where none is
// usable, so a machine without one never reports it as passed; a test of the no-GPU
// behaviour exits 77 where a GPU is present. STRATA_TEST_GPU is 1 or 0, set by the build.
#if STRATA_CATCH3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif
#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  const bool usable = e == cudaSuccess && devices > 0;
#if STRATA_TEST_GPU
  if (!usable) {
    std::printf("SKIPPED: no usable CUDA device (%s); this test runs on a machine with a GPU\n",
                e == cudaSuccess ? "the driver reports 0 devices" : cudaGetErrorString(e));
    return 77;
  }
#else
  if (usable) {
    std::printf("SKIPPED: this test checks the behaviour without a GPU, and %d device(s) are present\n", devices);
    return 77;
  }
#endif
  return Catch::Session().run(argc, argv);
}
