// strata-gpu: none
// Without a usable GPU (no driver, no device) the CUDA space and the NCCL communicator fail
// at once with a cuda_error that says why, instead of crashing later. Runs on machines
// with no GPU (CI); exits 77 (skipped) where a GPU is present.
#include <strata/comm/nccl.hpp>
#include <strata/space/cuda.hpp>
#include <string>

#include "catch.hpp"

namespace {
template <class F>
std::string cuda_error_of(F&& f) {
  try {
    f();
  } catch (const strata::cuda_error& e) {
    return e.what();
  }
  return "(no cuda_error)";
}
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("no device is reported as such, without throwing") {
  CHECK(strata::cuda_device_count() == 0);
  CHECK_FALSE(strata::cuda_available());
}

TEST_CASE("require_cuda says why no device can be used") {
  const std::string msg = cuda_error_of([] { strata::require_cuda("my_program"); });
  INFO(msg);
  CHECK(has(msg, "my_program: no usable CUDA device: cuda"));  // the CUDA error name follows
  CHECK(has(msg, "NVIDIA driver"));
}

TEST_CASE("device memory, pinned memory and streams fail with a cuda_error") {
  const auto before = strata::cuda::counters().live.load();
  const std::string dev = cuda_error_of([] { strata::cuda_buffer<float> b(10); });
  INFO(dev);
  CHECK(has(dev, "cudaMalloc of 40 bytes failed: cuda"));
  CHECK(strata::cuda::counters().live.load() == before);  // nothing counted for a failed allocation
  CHECK(has(cuda_error_of([] { strata::pinned_buffer<float> b(10); }), "cudaMallocHost of 40 bytes failed"));
  const std::string stream = cuda_error_of([] { strata::cuda_stream s; });
  CHECK(has(stream, "cudaStreamCreateWithPriority(&s_, flags, priority) failed: cuda"));
  CHECK(has(stream, "space/cuda_stream.hpp:"));  // file and line of the check
}

TEST_CASE("choosing a device by local rank fails with the reason") {
  CHECK(has(cuda_error_of([] { strata::select_device(0); }), "device_for_local_rank: no usable CUDA device"));
}

TEST_CASE("the NCCL bootstrap from the environment fails before any network traffic") {
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", "29999", 1);
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  const std::string msg = cuda_error_of([] { strata::nccl_comm::from_env(); });
  CHECK(has(msg, "no usable CUDA device"));
}
