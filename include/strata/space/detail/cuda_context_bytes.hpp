// This process's CUDA context, measured: the device's used memory before and after
// select_device makes the context, read through NVML, the one counter that needs no
// context of its own (cudaMemGetInfo makes one first). The context holds the driver's
// state, the local memory reserved for every thread the device can run, the device-side
// heap and the code loaded so far; it is part of what a run takes before any buffer.
#pragma once
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstddef>
#include <mutex>
#include <optional>

#include "cuda_check.hpp"

namespace strata::detail {

// NVML and the driver API are opened at run time: both come with the driver
// (libnvidia-ml.so.1, libcuda.so.1), and linking neither keeps every program that never
// measures free of them. The declarations below are their stable C ABI.
class nvml_session {
 public:
  nvml_session() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return;
    init_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlInit_v2"));
    shutdown_ = reinterpret_cast<int (*)()>(dlsym(lib_, "nvmlShutdown"));
    by_bus_ = reinterpret_cast<int (*)(const char*, void**)>(dlsym(lib_, "nvmlDeviceGetHandleByPciBusId_v2"));
    memory_ = reinterpret_cast<int (*)(void*, memory*)>(dlsym(lib_, "nvmlDeviceGetMemoryInfo"));
    ok_ = init_ && shutdown_ && by_bus_ && memory_ && init_() == 0;  // 0: NVML_SUCCESS
  }
  nvml_session(const nvml_session&) = delete;
  nvml_session& operator=(const nvml_session&) = delete;
  ~nvml_session() {
    if (ok_) (void)shutdown_();
    if (lib_) dlclose(lib_);
  }
  // The used bytes of the device at this PCI address ("0000:3b:00.0"), or nothing.
  std::optional<std::size_t> used(const char* bus) const {
    void* device = nullptr;
    memory m{};
    if (!ok_ || by_bus_(bus, &device) != 0 || memory_(device, &m) != 0) return std::nullopt;
    return static_cast<std::size_t>(m.used);
  }

 private:
  struct memory {  // nvmlMemory_t
    unsigned long long total, free, used;
  };
  void* lib_ = nullptr;
  bool ok_ = false;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*by_bus_)(const char*, void**) = nullptr;
  int (*memory_)(void*, memory*) = nullptr;
};

// Whether the primary context of `device` exists already (the driver's
// cuDevicePrimaryCtxGetState, from the libcuda.so.1 the runtime has loaded); nothing
// where that cannot be asked.
inline std::optional<bool> primary_context_active(int device) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return std::nullopt;
  const auto state = reinterpret_cast<int (*)(int, unsigned*, int*)>(dlsym(lib, "cuDevicePrimaryCtxGetState"));
  unsigned flags = 0;
  int active = 0;
  std::optional<bool> r;
  if (state && state(device, &flags, &active) == 0) r = active != 0;  // 0: CUDA_SUCCESS
  dlclose(lib);                                                       // drops the reference RTLD_NOLOAD took
  return r;
}

struct context_record {
  std::mutex m;
  bool tried = false;
  std::optional<std::size_t> bytes;
};
inline context_record& measured_context() {
  static context_record r;
  return r;
}

// Makes `device` current and its primary context exist (cudaFree(nullptr) makes it where
// cudaSetDevice did not). The first call of the process measures the context, when it is
// this call that makes it: NVML's used bytes before and after.
inline void set_device_measuring_context(int device) {
  auto& rec = measured_context();
  std::lock_guard lock(rec.m);
  if (rec.tried) {
    STRATA_CHECK_CUDA(cudaSetDevice(device));
    return;
  }
  rec.tried = true;
  char bus[32] = {};
  std::optional<std::size_t> before;
  std::optional<nvml_session> nvml;
  if (primary_context_active(device) == false) {
    if (cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device) != cudaSuccess)
      (void)cudaGetLastError();
    else if (primary_context_active(device) == false)
      before = nvml.emplace().used(bus);
  }
  STRATA_CHECK_CUDA(cudaSetDevice(device));
  STRATA_CHECK_CUDA(cudaFree(nullptr));
  if (before)
    if (const auto after = nvml->used(bus)) rec.bytes = *after > *before ? *after - *before : 0;
}

}  // namespace strata::detail

namespace strata {

// The bytes of this process's CUDA context, as select_device measured them when it made
// the context; nothing where it did not (no NVML, or a context made before it).
inline std::optional<std::size_t> cuda_context_bytes() {
  auto& rec = detail::measured_context();
  std::lock_guard lock(rec.m);
  return rec.bytes;
}

}  // namespace strata
