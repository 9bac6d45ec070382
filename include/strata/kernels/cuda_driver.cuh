// The CUDA driver of kernels/: a grid-stride kernel that runs an elementwise functor over
// a flat shard, with the prefetching and launch sizing that optim/cuda_optim.cuh's run
// kernel (every decay run of a shard in one launch) shares.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>

#include "../space/cuda.hpp"
#include "adamw.hpp"
#include "lion.hpp"
#include "sgd.hpp"
#include "vector_access.hpp"

namespace strata::kernels {

namespace detail {

inline constexpr int cuda_block = 256;
inline constexpr int cuda_max_devices = 64;

// Iterations ahead of the current element whose inputs a thread prefetches into L2.
inline constexpr int cuda_prefetch_ahead = 2;

__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// The inputs an update functor reads for element i. The functors read and write through
// pointers that may alias, so the compiler cannot hoist the next element's loads above
// this element's stores, and a thread waits out one memory latency after another;
// prefetches carry no such dependency and keep enough bytes in flight to approach the
// copy bandwidth. Functors without a specialization are not prefetched.
template <class F>
struct cuda_prefetch {
  __device__ static void inputs(const F&, std::size_t) {}
};
template <class P, class G, write_mode W>
struct cuda_prefetch<adamw_update<P, G, W>> {
  __device__ static void inputs(const adamw_update<P, G, W>& f, std::size_t i) {
    prefetch_l2(f.grad + i);
    prefetch_l2(f.exp_avg + i);
    prefetch_l2(f.exp_avg_sq + i);
    prefetch_l2(f.master + i);
  }
};
template <class P, class G, write_mode W, bool Momentum>
struct cuda_prefetch<sgd_update<P, G, W, Momentum>> {
  __device__ static void inputs(const sgd_update<P, G, W, Momentum>& f, std::size_t i) {
    prefetch_l2(f.grad + i);
    prefetch_l2(f.master + i);
    if constexpr (Momentum) prefetch_l2(f.momentum_buffer + i);
  }
};
template <class P, class G, write_mode W>
struct cuda_prefetch<lion_update<P, G, W>> {
  __device__ static void inputs(const lion_update<P, G, W>& f, std::size_t i) {
    prefetch_l2(f.grad + i);
    prefetch_l2(f.exp_avg + i);
    prefetch_l2(f.master + i);
  }
};

// f(i) for i in [begin, end) step blockDim.x from begin + threadIdx.x, prefetching
// cuda_prefetch_ahead iterations ahead (the first ones before the loop).
template <class F>
__device__ __forceinline__ void run_range(const F& f, std::size_t begin, std::size_t end) {
  const std::size_t step = blockDim.x;
  const std::size_t first = begin + threadIdx.x;
  for (int d = 0; d < cuda_prefetch_ahead; ++d)
    if (first + d * step < end) cuda_prefetch<F>::inputs(f, first + d * step);
  for (std::size_t i = first; i < end; i += step) {
    const std::size_t ahead = i + cuda_prefetch_ahead * step;
    if (ahead < end) cuda_prefetch<F>::inputs(f, ahead);
    f(i);
  }
}

// Functors with a vector form: step_vector(i) updates elements i .. i + vector_width - 1
// (i a multiple of the width) with one wide access per array, where vector_aligned().
template <class F>
concept vector_functor = requires(const F& f, std::size_t i) {
  f.step_vector(i);
  { f.vector_aligned() } -> std::convertible_to<bool>;
  F::vector_width;
};

// run_range with step_vector for the whole vectors inside [begin, end): consecutive
// threads take consecutive vectors (coalesced, 16 bytes a thread per fp32 array), and
// the ragged head and tail (fewer than a vector each) go element by element. The same
// functions of each element's values as f(i): the same bits.
template <vector_functor F>
__device__ __forceinline__ void run_range_vector(const F& f, std::size_t begin, std::size_t end) {
  constexpr std::size_t w = F::vector_width;
  const auto [body_begin, body_end] = vector_body(begin, end, w);
  for (std::size_t i = begin + threadIdx.x; i < body_begin; i += blockDim.x) f(i);
  for (std::size_t i = body_end + threadIdx.x; i < end; i += blockDim.x) f(i);
  const std::size_t step = static_cast<std::size_t>(blockDim.x) * w;
  const std::size_t first = body_begin + threadIdx.x * w;
  for (int d = 0; d < cuda_prefetch_ahead; ++d)
    if (first + d * step < body_end) cuda_prefetch<F>::inputs(f, first + d * step);
  for (std::size_t i = first; i < body_end; i += step) {
    const std::size_t ahead = i + cuda_prefetch_ahead * step;
    if (ahead < body_end) cuda_prefetch<F>::inputs(f, ahead);
    f.step_vector(i);
  }
}

template <class F>
__global__ void __launch_bounds__(cuda_block) grid_stride_kernel(std::size_t n, F f) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (i + stride < n) cuda_prefetch<F>::inputs(f, i + stride);
    f(i);
  }
}

// Blocks that fill every multiprocessor of the current device at full occupancy: more
// only queue behind them, since every kernel here loops grid-stride. Cached per device
// and kernel (the kernel itself, not its type: two kernels of one signature differ in
// registers and occupancy), so a launch costs one cudaGetDevice.
template <auto kernel>
int resident_blocks() {
  static std::atomic<int> cache[cuda_max_devices] = {};
  const int dev = current_device();
  const int slot = dev < cuda_max_devices ? dev : 0;
  int blocks = dev < cuda_max_devices ? cache[slot].load(std::memory_order_relaxed) : 0;
  if (blocks == 0) {
    int sms = 0, per_sm = 0;
    STRATA_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    STRATA_CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, cuda_block, 0));
    blocks = std::max(1, sms * per_sm);
    if (dev < cuda_max_devices) cache[slot].store(blocks, std::memory_order_relaxed);
  }
  return blocks;
}

inline void check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw cuda_error(strata::cat(what, ": kernel launch failed: ", strata::detail::cuda_error_text(e)));
}

}  // namespace detail

// Runs f(i) for every i in [0, n) on `stream` (asynchronously). f is copied to the
// device by value: its pointers must be device-accessible.
template <class F>
void run_cuda(std::size_t n, const F& f, cudaStream_t stream) {
  if (n == 0) return;
  constexpr auto kernel = &detail::grid_stride_kernel<F>;
  const std::size_t needed = (n + detail::cuda_block - 1) / detail::cuda_block;
  const int blocks = static_cast<int>(std::min<std::size_t>(needed, detail::resident_blocks<kernel>()));
  strata::detail::clear_stale_cuda_error();
  kernel<<<blocks, detail::cuda_block, 0, stream>>>(n, f);
  detail::check_launch("run_cuda");
}

}  // namespace strata::kernels
