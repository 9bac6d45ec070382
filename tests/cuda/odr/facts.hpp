// What each translation unit of the ODR test reports about the strata definitions it
// compiled: type layouts (compile-time constants of that TU) and the addresses of
// singletons and inline functions (which the linker must have merged into one).
#pragma once
#include <cstddef>  // offsetof
#include <string>
#include <vector>

namespace odr {

struct facts {
  std::vector<std::size_t> layout;  // sizeof / alignof / offsetof of shared types, in a fixed order
  std::vector<const void*> singletons;
  std::vector<const void*> functions;
};

facts from_cuda_tu();  // device_side.cu (nvcc)
facts from_cxx_tu();   // host_side.cpp (g++)

}  // namespace odr

// The list both translation units expand, so they measure the same things in the same order.
// strata::cuda is spelled out: under `using namespace strata` a bare `cuda` is ambiguous
// with CCCL's namespace ::cuda in a CUDA translation unit.
#define STRATA_ODR_FACTS(F)                                                                                          \
  do {                                                                                                               \
    using namespace strata;                                                                                          \
    using K = kernels::write_mode;                                                                                   \
    using shard_t = shard_args<bf16, float>;                                                                         \
    using adamw_t = kernels::adamw_update<bf16, bf16, K::stochastic>;                                                \
    using sgd_t = kernels::sgd_update<fp16, float, K::nearest_even, true>;                                           \
    using lion_t = kernels::lion_update<float, float, K::none>;                                                      \
    F.layout = {sizeof(bf16),                                                                                        \
                alignof(bf16),                                                                                       \
                sizeof(fp16),                                                                                        \
                sizeof(shape),                                                                                       \
                alignof(shape),                                                                                      \
                sizeof(shard_t),                                                                                     \
                offsetof(shard_t, global_offset),                                                                    \
                sizeof(decay_run),                                                                                   \
                sizeof(adamw_t),                                                                                     \
                offsetof(adamw_t, eps),                                                                              \
                offsetof(adamw_t, index_base),                                                                       \
                sizeof(sgd_t),                                                                                       \
                offsetof(sgd_t, first),                                                                              \
                sizeof(lion_t),                                                                                      \
                sizeof(detail::device_run),                                                                          \
                sizeof(cuda_run_table),                                                                              \
                sizeof(buffer<float, strata::cuda>),                                                                 \
                sizeof(buffer<float, pinned>),                                                                       \
                sizeof(cuda_stream),                                                                                 \
                sizeof(cuda_event),                                                                                  \
                sizeof(nccl_options),                                                                                \
                sizeof(nccl_comm),                                                                                   \
                sizeof(adamw),                                                                                       \
                sizeof(sgd),                                                                                         \
                sizeof(lion),                                                                                        \
                sizeof(tensor<float>),                                                                               \
                sizeof(param<float>),                                                                                \
                sizeof(trainer_options),                                                                             \
                sizeof(world_comm),                                                                                  \
                sizeof(request)};                                                                                    \
    F.singletons = {&host::counters(), &strata::cuda::counters(), &pinned::counters(), &detail::env_session::get()}; \
    F.functions = {reinterpret_cast<const void*>(&detail::float_to_bf16_rne),                                        \
                   reinterpret_cast<const void*>(&kernels::detail::rounding_noise),                                  \
                   reinterpret_cast<const void*>(&cuda_device_count),                                                \
                   reinterpret_cast<const void*>(&detail::check_cuda)};                                              \
  } while (0)
