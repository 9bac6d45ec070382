// The launch shape and launch check of the CUDA space's kernels (space/cuda_ops.cuh,
// space/cuda_id_checks.cuh).
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda_check.hpp"

namespace strata::detail {

// Threads per block of every kernel of the space. Kernels are templates (on the block size or a
// functor) so that these headers can be included by several .cu files of one program
// without duplicate kernel symbols.
inline constexpr int cuda_ops_block = 256;
// Blocks of a kernel that loops over rows, tiles or elements: enough to fill any current
// GPU (132 SMs x 8 resident blocks of 256 threads) many times over; more would only add
// scheduling. Results never depend on it: every item is one block's or thread's work.
inline constexpr std::int64_t cuda_ops_max_blocks = 1 << 16;

inline unsigned cuda_blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(items, cuda_ops_max_blocks)));
}
// The most blocks a grid takes in y (CUDA's limit).
inline constexpr std::int64_t cuda_max_grid_y = 65535;
inline unsigned cuda_blocks_for_threads(std::int64_t threads) {
  return cuda_blocks_for((threads + cuda_ops_block - 1) / cuda_ops_block);
}

inline void check_ops_launch() { STRATA_CHECK_CUDA(cudaGetLastError()); }

}  // namespace strata::detail
