// MFU's denominator on a GPU: the datasheet peak by the name CUDA reports.
#include <strata/observe/gpu_peaks.hpp>
#include "catch.hpp"

TEST_CASE("a GPU's peak comes from its CUDA name, the most specific entry first", "[mfu]") {
  REQUIRE(strata::gpu_peak_flops("NVIDIA H100 80GB HBM3", true) == 989.4e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA H100 PCIe", true) == 756.0e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA H100 NVL", true) == 835.5e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA H200", true) == 989.4e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA H200 NVL", false) == 60.0e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA A100-SXM4-80GB", true) == 312.0e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA A100 80GB PCIe", false) == 19.5e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA L40S", true) == 362.1e12);  // not L4's
  REQUIRE(strata::gpu_peak_flops("NVIDIA L4", true) == 121.0e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA A10", false) == 31.2e12);
  REQUIRE(strata::gpu_peak_flops("NVIDIA GeForce RTX 4090", true) == 0);  // unknown: no MFU
}

TEST_CASE("16-bit tensor-core peaks exceed the fp32 peaks they are listed with", "[mfu]") {
  for (const auto& p : strata::gpu_peaks) {
    INFO(p.name);
    REQUIRE(p.tensor16 > p.fp32);
    REQUIRE(p.fp32 > 1e12);
  }
}
