// Checks of ids (token ids, labels) on a GPU: a kernel flags the first value that is not
// an id, ops<cuda>::check_ids reads it back at once, and deferred_id_checks<cuda> queues
// a step's checks and reads them back together.
#pragma once
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "cuda.hpp"
#include "cuda_transfer.hpp"
#include "detail/cuda_launch.cuh"
#include "ops.hpp"

namespace strata {

namespace detail {

// The host's test of an id: a whole number in [0, limit) (or ignore_label, for labels).
__device__ inline bool is_id(float v, std::int64_t limit, bool labels) {
  return (v >= 0.0f && v < static_cast<float>(limit) && v == floorf(v)) || (labels && v == ignore_label);
}

// The smallest position whose value is not an id goes to *first (atomicMin on an integer
// is order-free, so the result is deterministic).
template <int Block>
__global__ void __launch_bounds__(Block)
    check_ids_kernel(std::int64_t n, std::int64_t limit, const float* values, bool labels, unsigned long long* first) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Block;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * Block + threadIdx.x; i < n; i += stride)
    if (!is_id(values[i], limit, labels)) atomicMin(first, static_cast<unsigned long long>(i));
}

// A check's result on the device: the first bad position (all bits set: none) and its value.
struct id_slot {
  unsigned long long first;
  float value;
};

// slot->value = the value at the first bad position, where there is one.
template <int Block>
__global__ void __launch_bounds__(Block) flagged_value_kernel(std::int64_t n, const float* values, id_slot* slot) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && slot->first < static_cast<unsigned long long>(n))
    slot->value = values[slot->first];
}

// Queues the check of values[0, n) into *first on s (no wait).
inline void queue_id_check(cudaStream_t s, std::int64_t n, std::int64_t limit, const float* values, bool labels,
                           unsigned long long* first) {
  // All bits set: larger than every position, so atomicMin finds the first.
  STRATA_CHECK_CUDA(cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), s));
  if (n <= 0) return;
  strata::detail::clear_stale_cuda_error();
  check_ids_kernel<cuda_ops_block>
      <<<cuda_blocks_for_threads(n), cuda_ops_block, 0, s>>>(n, limit, values, labels, first);
  check_ops_launch();
}

}  // namespace detail

// A GPU trainer's id checks (space/ops.hpp): each is queued on the stream into its own
// slot, and settle() reads every slot back in one copy, once per step, throwing the
// first failure in queue order with the layer's message. The host thus waits once per
// step instead of at every embedding and loss forward.
template <>
class deferred_id_checks<cuda> {
 public:
  using message_fn = std::function<std::string(float, std::int64_t)>;
  // Checks between two settles; a step with more settles early (one more wait).
  static constexpr std::size_t capacity = 256;

  deferred_id_checks() : slots_(capacity), host_(capacity) {}

  void queue(const executor<cuda>& exec, std::int64_t n, std::int64_t limit, const float* values, bool labels,
             message_fn message, std::source_location loc) {
    if (pending_.size() == capacity || (!pending_.empty() && exec.stream != stream_)) settle();
    stream_ = exec.stream;
    detail::id_slot* slot = slots_.data() + pending_.size();
    detail::queue_id_check(exec.stream, n, limit, values, labels, &slot->first);
    if (n > 0) {
      detail::flagged_value_kernel<1><<<1, 1, 0, exec.stream>>>(n, values, slot);
      detail::check_ops_launch();
    }
    pending_.push_back({std::move(message), n, loc});
  }

  // Waits for the queued checks (through wait_stream: a failed peer is an error, not a
  // hang) and throws the first that failed; none are left queued either way.
  void settle() {
    if (pending_.empty()) return;
    const std::vector<entry> pending = std::move(pending_);
    pending_.clear();
    strata::download(stream_, host_.data(), slots_.data(), pending.size() * sizeof(detail::id_slot));
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const detail::id_slot& slot = host_.data()[k];
      const entry& e = pending[k];
      expects<error>(
          slot.first >= static_cast<unsigned long long>(e.n),
          [&] { return e.message(slot.value, static_cast<std::int64_t>(slot.first)); }, e.loc);
    }
  }
  std::size_t queued() const noexcept { return pending_.size(); }

 private:
  struct entry {
    message_fn message;
    std::int64_t n;
    std::source_location loc;
  };
  buffer<detail::id_slot, cuda> slots_;
  buffer<detail::id_slot, pinned> host_;
  std::vector<entry> pending_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace strata
