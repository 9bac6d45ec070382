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

}  // namespace detail

// Copies `bytes` from device memory to host memory after the work queued on `s`, and
// returns when they have landed.
inline void download(cudaStream_t s, void* host_dst, const void* dev_src, std::size_t bytes) {
  if (bytes == 0) return;
  if (detail::is_pinned(host_dst)) {
    cuda::copy_async(host_dst, dev_src, bytes, s);
    wait_stream(s);
    return;
  }
  for (std::size_t at = 0; at < bytes; at += detail::staging_chunk) {
    const std::size_t n = std::min(detail::staging_chunk, bytes - at);
    std::byte* stage = detail::staging(n);
    cuda::copy_async(stage, static_cast<const std::byte*>(dev_src) + at, n, s);
    wait_stream(s);
    std::memcpy(static_cast<std::byte*>(host_dst) + at, stage, n);
  }
}

// Copies `bytes` from host memory to device memory after the work queued on `s`, and
// returns when they have landed (the host memory may be changed after).
inline void upload(cudaStream_t s, void* dev_dst, const void* host_src, std::size_t bytes) {
  if (bytes == 0) return;
  if (detail::is_pinned(host_src)) {
    cuda::copy_async(dev_dst, host_src, bytes, s);
    wait_stream(s);
    return;
  }
  for (std::size_t at = 0; at < bytes; at += detail::staging_chunk) {
    const std::size_t n = std::min(detail::staging_chunk, bytes - at);
    std::byte* stage = detail::staging(n);
    std::memcpy(stage, static_cast<const std::byte*>(host_src) + at, n);
    cuda::copy_async(static_cast<std::byte*>(dev_dst) + at, stage, n, s);
    wait_stream(s);
  }
}

}  // namespace strata
