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
// Live bytes per space, for the memory report and for tests that check no allocation
// happens inside a training step.
struct space_counters {
  std::atomic<std::size_t> live{0};
  std::atomic<std::size_t> peak{0};
  std::atomic<std::size_t> allocations{0};
  void add(std::size_t n) {
    const auto now = live.fetch_add(n) + n;
    auto p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    allocations.fetch_add(1);
  }
  void sub(std::size_t n) { live.fetch_sub(n); }
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
