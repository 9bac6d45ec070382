// The device memory of a trainer's run, measured into space/device_memory.hpp's record:
// the device's used memory (cudaMemGetInfo) when the run starts and its largest sample
// since, strata's allocator high-water mark, and the used memory that a call outside
// that allocator takes (cublasCreate, the NCCL communicators' init).
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>

#include "cuda.hpp"
#include "detail/cuda_check.hpp"
#include "device_memory.hpp"

namespace strata {

// The current device's used and total bytes, as its driver counts them (every process's
// allocations and contexts). A driver query: microseconds, no synchronization.
struct device_usage {
  std::size_t used = 0, total = 0;
};
inline device_usage device_usage_now() {
  std::size_t free = 0, total = 0;
  STRATA_CHECK_CUDA(cudaMemGetInfo(&free, &total));
  return {total - free, total};
}

// Made first thing by a device trainer's engine, before any of its buffers: the start.
// It restarts strata's high-water mark (cuda::counters().peak), which is per process: of
// two trainers alive at once, the older one's peak then counts from the newer one's start.
class cuda_memory_meter {
 public:
  cuda_memory_meter() {
    const device_usage u = device_usage_now();
    m_.total = u.total;
    m_.start_used = m_.peak_used = u.used;
    cuda::counters().reset_peak();
    m_.strata_start = cuda::counters().live.load();
    m_.context = cuda_context_bytes();
  }

  // Keeps the device's used memory now if it is the most so far. Called where the
  // trainer's buffers are all sized and held: after a step or evaluation has synchronized.
  void sample() {
    m_.peak_used = std::max(m_.peak_used, device_usage_now().used);
    m_.strata_blocks = std::max(m_.strata_blocks, cuda::counters().blocks.load());
  }

  // A point to measure from (the engine's make_comm: a communicator's making).
  struct mark {
    std::size_t used = 0, strata = 0;
  };
  mark mark_now() const { return {device_usage_now().used, cuda::counters().live.load()}; }
  // Adds to `into` the used memory taken since `from`, less what strata's allocator took meanwhile.
  void add_since(std::size_t device_memory::*into, const mark& from) {
    const mark now = mark_now();
    const std::size_t strata = now.strata > from.strata ? now.strata - from.strata : 0;
    const std::size_t grew = now.used > from.used ? now.used - from.used : 0;
    m_.*into += grew > strata ? grew - strata : 0;
  }
  template <class F>
  void measure(std::size_t device_memory::*into, F&& f) {
    const mark from = mark_now();
    f();
    add_since(into, from);
  }

  // The record now (sampled once more), with `report`, the device part of the trainer's report.
  device_memory read(std::size_t report) {
    sample();
    device_memory r = m_;
    r.strata_peak = cuda::counters().peak.load();
    r.report = report;
    return r;
  }

 private:
  device_memory m_;
};

}  // namespace strata
