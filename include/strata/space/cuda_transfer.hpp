// Host <-> device copies that cannot hang on a failed peer. cudaMemcpyAsync with pageable
// host memory blocks the calling thread until the stream reaches the copy, and a stream
// stuck behind a collective whose peer died never does: no poll could notice. These
// copy through pinned memory (the caller's where it is pinned, else a per-thread staging
// buffer, in chunks), so the copy only queues, and then wait on the stream with
// wait_stream, which polls the NCCL communicators and throws their comm_error.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "../core/buffer.hpp"
#include "cuda.hpp"
#include "cuda_stream.hpp"

namespace strata {

namespace detail {

// Pinned (page-locked or registered) host memory, which asynchronous copies need not wait for.
inline bool is_pinned(const void* p) {
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // pageable memory on older runtimes: an error, not a state
    return false;
  }
  return a.type == cudaMemoryTypeHost;
}

// Staging for pageable host memory: one per thread, grown to at most one chunk.
inline constexpr std::size_t staging_chunk = std::size_t{32} << 20;
inline std::byte* staging(std::size_t bytes) {
  thread_local buffer<std::byte, pinned> b;
  if (b.size() < bytes) b = buffer<std::byte, pinned>(std::max(bytes, std::min(staging_chunk, 2 * b.size())));
  return b.data();
}

// A copy between device memory and host memory (`to_host`: dst is the host's) after
// the work queued on `s`, returning when the bytes have landed.
inline void copy_through_pinned(cudaStream_t s, void* dst, const void* src, std::size_t bytes, bool to_host) {
  if (bytes == 0) return;
  if (is_pinned(to_host ? dst : src)) {
    cuda::copy_async(dst, src, bytes, s);
    wait_stream(s);
    return;
  }
  auto* d = static_cast<std::byte*>(dst);
  const auto* from = static_cast<const std::byte*>(src);
  for (std::size_t at = 0; at < bytes; at += staging_chunk) {
    const std::size_t n = std::min(staging_chunk, bytes - at);
    std::byte* stage = staging(n);
    if (!to_host) std::memcpy(stage, from + at, n);
    cuda::copy_async(to_host ? stage : d + at, to_host ? from + at : stage, n, s);
    wait_stream(s);
    if (to_host) std::memcpy(d + at, stage, n);
  }
}

}  // namespace detail

// Copies `bytes` from device memory to host memory after the work queued on `s`, and
// returns when they have landed.
inline void download(cudaStream_t s, void* host_dst, const void* dev_src, std::size_t bytes) {
  detail::copy_through_pinned(s, host_dst, dev_src, bytes, true);
}

// Copies `bytes` from host memory to device memory after the work queued on `s`, and
// returns when they have landed (the host memory may be changed after).
inline void upload(cudaStream_t s, void* dev_dst, const void* host_src, std::size_t bytes) {
  detail::copy_through_pinned(s, dev_dst, host_src, bytes, false);
}

}  // namespace strata
