// The host space: 64-byte aligned memory with byte accounting, and the host execution
// resources (OpenMP threads) that the host drivers of kernels/ run on.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "../core/buffer.hpp"

namespace strata {

namespace detail {
// Raises `peak` to at least `now`, whatever other threads do meanwhile (a lost race
// retries only while `now` is still the larger).
inline void raise_to(std::atomic<std::size_t>& peak, std::size_t now) noexcept {
  auto p = peak.load(std::memory_order_relaxed);
  while (now > p && !peak.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
  }
}

// Live bytes per space, for the memory report and for tests that check no allocation
// happens inside a training step; the high-water mark of those bytes, which a device
// trainer holds to its report (space/device_memory.hpp); and the live allocations, each
// of which the CUDA driver may round up to its 2 MiB page. Every member is one atomic
// operation or a short compare-exchange loop: an allocation costs far more.
struct space_counters {
  std::atomic<std::size_t> live{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> allocations{0};  // ever made
  std::atomic<std::size_t> blocks{0};       // live now
  void add(std::size_t n) noexcept {
    raise_to(peak, live.fetch_add(n) + n);
    allocations.fetch_add(1, std::memory_order_relaxed);
    blocks.fetch_add(1, std::memory_order_relaxed);
  }
  void sub(std::size_t n) noexcept {
    live.fetch_sub(n);
    blocks.fetch_sub(1, std::memory_order_relaxed);
  }
  // Restarts the high-water mark from the bytes live now, so that one phase (a trainer's
  // life) is measured on its own. An add racing with it may count or not; both are true.
  void reset_peak() noexcept { peak.store(live.load()); }
};
}  // namespace detail

struct host {
  static constexpr bool host_accessible = true;
  static constexpr const char* name = "host";
  static constexpr std::size_t alignment = 64;  // a cache line, and enough for AVX-512 loads

  static void* allocate(std::size_t bytes) {
    const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, rounded);
    if (!p) throw std::bad_alloc();
    counters().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) {
    std::free(p);
    counters().sub(bytes);
  }
  static void zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
  static void copy(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
  static detail::space_counters& counters() {
    static detail::space_counters c;
    return c;
  }
};

template <class T>
using host_buffer = buffer<T, host>;

// What a computation in a space runs on, carried by the trainer's context to every layer:
// nothing on the host (OpenMP and BLAS need no handle); a stream and a cuBLAS handle in
// the CUDA space (space/cuda.hpp).
template <class Space>
struct executor {};

// Where an offloaded optimizer state lives for a space: the host keeps it where it is;
// the CUDA space puts it in pinned host memory (space/cuda.hpp).
template <class Space>
struct offload_space {
  using type = Space;
};

}  // namespace strata
