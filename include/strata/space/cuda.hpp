// The CUDA spaces: device memory (cudaMalloc, never managed memory) and pinned host
// memory (cudaMallocHost), with byte accounting, device discovery and choice by local rank.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>  // std::nothrow_t
#include <string>
#include <string_view>

#include "../core/buffer.hpp"
#include "../core/error.hpp"
#include "cuda_stream.hpp"
#include "detail/cuda_check.hpp"
#include "detail/cuda_context_bytes.hpp"
#include "host.hpp"

namespace strata {

// The number of CUDA devices this process can use; 0 when there is no driver, no
// device, or CUDA_VISIBLE_DEVICES hides them all. Never throws.
inline int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

inline bool cuda_available() noexcept { return cuda_device_count() > 0; }

// What a program that needs a GPU finds: a usable device, none at all (no NVIDIA driver
// installed, cudaErrorNoDevice, or a count of 0: the one case a GPU test may skip), or a
// broken GPU machine (a driver older than this runtime, or any other error), with why.
struct cuda_probe {
  bool usable = false, absent = false;
  int devices = 0;
  std::string reason;  // empty when usable
};

inline cuda_probe probe_cuda() {
  cuda_probe p;
  const cudaError_t e = cudaGetDeviceCount(&p.devices);
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    p.devices = 0;
    p.absent = driver == 0 || e == cudaErrorNoDevice;
    p.reason = strata::cat(detail::cuda_error_text(e), driver == 0 ? " (no NVIDIA driver is installed)" : "");
  } else if (p.devices == 0) {
    p.absent = true;
    p.reason = "the driver reports 0 devices (CUDA_VISIBLE_DEVICES?)";
  }
  p.usable = p.devices > 0;
  return p;
}

// STRATA_REQUIRE_GPU=1 (set by scripts/gpu-check): a program that would skip for want of
// a GPU fails instead, so a machine meant to have one cannot report success without it.
inline bool gpu_required() {
  const char* v = std::getenv("STRATA_REQUIRE_GPU");
  return v && std::string_view(v) == "1";
}

// Throws a cuda_error saying why no device can be used, and what to check.
inline void require_cuda(const char* who = "strata") {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(strata::cat(who, ": no usable CUDA device: ", detail::cuda_error_text(e),
                                 ". Check that an NVIDIA driver is loaded (nvidia-smi) and is at least as new as the "
                                 "CUDA runtime this program was built with (",
                                 CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10, ")"));
  }
  expects<cuda_error>(
      n > 0, [&] { return strata::cat(who, ": the CUDA driver reports no device; check CUDA_VISIBLE_DEVICES"); });
}

// The device a process with this local rank (its index among the processes of its
// node) uses: device local_rank, or device 0 when each process sees exactly one device
// (a launcher that sets CUDA_VISIBLE_DEVICES per process, as Slurm's --gpus-per-task).
inline int device_for_local_rank(int local_rank) {
  require_cuda("device_for_local_rank");
  const int n = cuda_device_count();
  expects<config_error>(local_rank >= 0, [&] { return strata::cat("local rank ", local_rank, " must be >= 0"); });
  if (n == 1) return 0;
  expects<cuda_error>(local_rank < n, [&] {
    return strata::cat("local rank ", local_rank, " has no GPU: this node shows ", n,
                       " devices. Start at most one process per GPU on each node, or give each process one "
                       "device through CUDA_VISIBLE_DEVICES");
  });
  return local_rank;
}

// Makes the device of this local rank current for the calling thread, with its context,
// and returns it. The process's first call measures the context it makes
// (cuda_context_bytes(), space/detail/cuda_context_bytes.hpp).
inline int select_device(int local_rank) {
  const int d = device_for_local_rank(local_rank);
  detail::set_device_measuring_context(d);
  return d;
}

inline int current_device() {
  int d = 0;
  STRATA_CHECK_CUDA(cudaGetDevice(&d));
  return d;
}

// Makes `device` current for a scope and restores the previous one after.
// (The usual case, the device already current, costs one cudaGetDevice: a communicator
// makes one of these per operation.)
class device_guard {
 public:
  explicit device_guard(int device) : previous_(current_device()) {
    if (device != previous_) {
      STRATA_CHECK_CUDA(cudaSetDevice(device));
      changed_ = true;
    }
  }
  // For destructors: a failing CUDA call (a sticky error after a device fault) is ignored,
  // not thrown, so unwinding cannot terminate and hide the first error.
  device_guard(int device, std::nothrow_t) noexcept : previous_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = device;
    if (device != previous_) changed_ = cudaSetDevice(device) == cudaSuccess;
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_;
  bool changed_ = false;
};

// Device memory of the current device. Not readable from the host: buffer<T, cuda>
// offers data() and size(), and copies go through copy / copy_async.
struct cuda {
  static constexpr bool host_accessible = false;
  static constexpr const char* name = "cuda";
  static constexpr std::size_t alignment = 256;  // what cudaMalloc guarantees

  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw cuda_error(strata::cat("cudaMalloc of ", bytes, " bytes failed: ", detail::cuda_error_text(e),
                                   " (strata holds ", counters().live.load(), " bytes of device memory)"));
    }
    counters().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    (void)cudaFree(p);  // a destructor path: an error here has nowhere to go
    counters().sub(bytes);
  }
  // Zero-fills and waits: a buffer's first use may be on a non-blocking stream, which
  // the legacy default stream of cudaMemset does not order.
  static void zero(void* p, std::size_t bytes) {
    STRATA_CHECK_CUDA(cudaMemset(p, 0, bytes));
    STRATA_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  }
  // Copies between any two of host, pinned and device memory (unified addressing) and
  // returns when the copy is complete. cudaMemcpy alone may return before a device-to-
  // device copy or the DMA of a pageable host-to-device copy has landed, and work on a
  // non-blocking stream would not be ordered after it.
  static void copy(void* dst, const void* src, std::size_t bytes) {
    STRATA_CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
    STRATA_CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
  }
  // Queues the copy on `s`; it overlaps the host only when host memory is pinned.
  static void copy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t s) {
    STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
  }
  static detail::space_counters& counters() {
    static detail::space_counters c;
    return c;
  }
  // The current device's name, as cudaDeviceProp::name ("NVIDIA H100 80GB HBM3").
  static std::string device_name() {
    cudaDeviceProp p{};
    STRATA_CHECK_CUDA(cudaGetDeviceProperties(&p, current_device()));
    return p.name;
  }
};

// Page-locked host memory: readable from the host, and the only host memory that
// asynchronous copies overlap with (offloaded optimizer state, staging buffers).
struct pinned {
  static constexpr bool host_accessible = true;
  static constexpr const char* name = "pinned";
  static constexpr std::size_t alignment = 256;

  static void* allocate(std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t e = cudaMallocHost(&p, bytes);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw cuda_error(strata::cat("cudaMallocHost of ", bytes, " bytes failed: ", detail::cuda_error_text(e)));
    }
    counters().add(bytes);
    return p;
  }
  static void deallocate(void* p, std::size_t bytes) noexcept {
    (void)cudaFreeHost(p);
    counters().sub(bytes);
  }
  static void zero(void* p, std::size_t bytes) { std::memset(p, 0, bytes); }
  static void copy(void* dst, const void* src, std::size_t bytes) { cuda::copy(dst, src, bytes); }
  static detail::space_counters& counters() {
    static detail::space_counters c;
    return c;
  }
};

static_assert(memory_space<cuda> && memory_space<pinned>);

template <class T>
using cuda_buffer = buffer<T, cuda>;

// Device memory that the operations of one stream borrow: add_column_sums' partial sums,
// the scatter's sort keys, 16-bit GEMM operands. It grows in stream order (cudaMallocAsync
// after cudaFreeAsync of the smaller one), so growing never waits for the device, and
// after the first step it stays put; counted in cuda::counters. Used from one stream at a
// time.
class cuda_scratch {
 public:
  cuda_scratch() = default;
  cuda_scratch(const cuda_scratch&) = delete;
  cuda_scratch& operator=(const cuda_scratch&) = delete;
  ~cuda_scratch() {
    if (p_) {
      (void)cudaFree(p_);  // a destructor path, after its stream's work (the owner synchronizes)
      cuda::counters().sub(bytes_);
    }
  }
  // At least `bytes` for work queued on s from now on.
  void* get(std::size_t bytes, cudaStream_t s) {
    if (bytes > bytes_) {
      release(s);
      STRATA_CHECK_CUDA(cudaMallocAsync(&p_, bytes, s));
      bytes_ = bytes;
      cuda::counters().add(bytes_);
    }
    return p_;
  }
  // Gives the memory back after the work queued on s so far.
  void release(cudaStream_t s) {
    if (!p_) return;
    STRATA_CHECK_CUDA(cudaFreeAsync(p_, s));
    cuda::counters().sub(bytes_);
    p_ = nullptr;
    bytes_ = 0;
  }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// What a CUDA executor's GEMMs read their operands as: fp32 as stored, or rounded to a
// 16-bit type (mixed<bf16|fp16>) and multiplied on tensor cores, accumulating and
// writing fp32 as PyTorch's autocast and Megatron do.
enum class gemm_operands : std::uint8_t { fp32, bf16, fp16 };

// The CUDA space's executor: the stream a layer's kernels and GEMMs go on, the cuBLAS
// handle bound to that stream, the scratch its reductions and 16-bit GEMM operands use
// (none: each call allocates its own in stream order), and its GEMMs' operand type. The
// trainer owns them; layers only borrow them.
template <>
struct executor<cuda> {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  cuda_scratch* scratch = nullptr;
  gemm_operands gemm = gemm_operands::fp32;
};

template <>
struct offload_space<cuda> {
  using type = pinned;
};
template <class T>
using pinned_buffer = buffer<T, pinned>;

// Element-wise copies between buffers of any two spaces (sizes must match).
template <class T, class S1, class S2>
void copy(buffer<T, S1>& dst, const buffer<T, S2>& src) {
  expects(dst.size() == src.size(), [&] {
    return strata::cat("copy: ", src.size(), " elements (", S2::name, ") into ", dst.size(), " (", S1::name, ")");
  });
  if (!dst.empty()) cuda::copy(dst.data(), src.data(), dst.bytes());
}

}  // namespace strata
