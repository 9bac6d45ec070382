// The dense peak FLOP/s of common data-centre GPUs, by the name CUDA reports
// (cudaDeviceProp::name), for MFU on a device: NVIDIA's datasheet figures without
// sparsity, 16-bit tensor-core math (bf16/fp16 with fp32 accumulation) and plain fp32.
#pragma once
#include <string_view>

namespace strata {

struct gpu_peak {
  std::string_view name;  // a part of the device name; the first match wins (specific first)
  double tensor16;        // bf16/fp16 tensor cores, dense
  double fp32;            // fp32 without tensor cores
};

inline constexpr gpu_peak gpu_peaks[] = {
    {"GH200", 989.4e12, 66.9e12},    {"H200 NVL", 835.5e12, 60.0e12},  {"H200", 989.4e12, 66.9e12},
    {"H100 NVL", 835.5e12, 60.0e12}, {"H100 PCIe", 756.0e12, 51.2e12}, {"H100", 989.4e12, 66.9e12},
    {"A100", 312.0e12, 19.5e12},     {"L40S", 362.1e12, 91.6e12},      {"L4", 121.0e12, 30.3e12},
    {"A10", 125.0e12, 31.2e12},      {"V100", 125.0e12, 15.7e12},
};

// One GPU's peak for a run in 16-bit (mixed<bf16|fp16>) or fp32 precision; 0 where the
// table does not know the device (give --peak-flops then).
inline double gpu_peak_flops(std::string_view device_name, bool sixteen_bit) {
  for (const auto& p : gpu_peaks)
    if (device_name.find(p.name) != std::string_view::npos) return sixteen_bit ? p.tensor16 : p.fp32;
  return 0;
}

}  // namespace strata
