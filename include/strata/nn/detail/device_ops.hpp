// What the nn/ layers need outside the host: the device_ops hook through which a layer
// reaches a space's kernels.
#pragma once
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>

#include "../../core/error.hpp"
#include "../../space/host.hpp"
#include "../../space/tensor.hpp"
#include "loops.hpp"

namespace strata::nn::detail {

// A space's layer kernels (GEMM, activations, losses) as static functions taking the
// space's executor. Declared only: the CUDA definition holds __global__ kernels, so it
// lives in cuda_ops.cuh, which only nvcc compiles. Layer headers stay plain C++ and name
// it only in the branch a non-host context instantiates.
template <class Space>
struct device_ops;

template <class T>
concept complete_type = requires { sizeof(T); };

// device_ops<Space>, or one readable error where a .cpp instantiates a layer in the CUDA
// space (instead of "incomplete type" deep inside the layer).
template <class Space>
struct checked_device_ops {
  static_assert(complete_type<device_ops<Space>>,
                "strata: nn layers in the CUDA space need the CUDA kernels: include <strata/cuda.cuh> from a .cu "
                "translation unit");
  using type = device_ops<Space>;
};
template <class Space>
using device_ops_for = typename checked_device_ops<Space>::type;

// What the device cross-entropy found among the targets: the first row whose target is
// not a class id (-1 when every target is one) and that target, for the host's message.
struct target_check {
  std::int64_t row = -1;
  float value = 0.0f;
};

}  // namespace strata::nn::detail
