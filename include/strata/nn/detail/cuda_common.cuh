// What the nn/ layers' CUDA kernels share: launch sizes, the fixed-order row, column and
// mean reductions, cuBLAS's int extents, and the first bad input a kernel flags for the
// host.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "../../core/error.hpp"
#include "../../space/cuda.hpp"
#include "device_ops.hpp"

namespace strata::nn::detail {

// Threads per block of the row and reduction kernels.
inline constexpr int cuda_nn_block = 256;
// Blocks of a kernel that loops over rows or column tiles: enough to fill any current GPU
// (132 SMs x 8 resident blocks of 256 threads) many times over; more would only add
// scheduling. Results do not depend on it: every row or column is one block's or
// thread's work, in a fixed order.
inline constexpr std::int64_t cuda_nn_max_blocks = 1 << 16;

// Kernels are templates (on the block size or a functor) so that these headers can be
// included by several .cu files of one program without duplicate kernel symbols.

// Blocks for a kernel whose blocks loop over `items` (rows or column tiles).
inline unsigned blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(items, cuda_nn_max_blocks)));
}

// The row max, compared as the host's loops compare (x > m ? x : m).
struct max_op {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

// ---- row reductions ------------------------------------------------------------------

// What a softmax-like kernel does with each row it takes in turn (one block per row):
// the row max, given to every thread, then a sum in double. Both reductions share one
// temp storage, which the kernel declares once:
//   __shared__ typename row_reduce<Block>::storage shared;
template <int Block>
struct row_reduce {
  using max_reduce = cub::BlockReduce<float, Block>;
  using sum_reduce = cub::BlockReduce<double, Block>;
  struct storage {
    union {
      typename max_reduce::TempStorage max;
      typename sum_reduce::TempStorage sum;
    } temp;
    float max;
    double sum;
  };

  // max of row[0..n) (n >= 1) as the host's loops compare, to every thread; temp may be
  // reused once it returns.
  static __device__ float max(storage& s, const float* row, std::int64_t n) {
    float m = row[0];
    for (std::int64_t j = threadIdx.x; j < n; j += Block) m = row[j] > m ? row[j] : m;
    m = max_reduce(s.temp.max).Reduce(m, max_op{});
    if (threadIdx.x == 0) s.max = m;
    __syncthreads();  // s.max is visible, and temp may be reused
    return s.max;
  }

  // The sum of every thread's part, in thread 0 only (CUB's fixed tree).
  static __device__ double sum(storage& s, double part) { return sum_reduce(s.temp.sum).Sum(part); }
};

// ---- column sums -------------------------------------------------------------------

// out[j] += sum over rows of term(i, j): one thread per column summing its rows in order,
// in double, as the host's add_column_sums does. The order is fixed (no atomics), so
// bias-like gradients are the same bits run to run, and the same bits as on the host.
template <int Block, class Term>
__global__ void __launch_bounds__(Block)
    column_sums_kernel(std::int64_t rows, std::int64_t cols, Term term, float* out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols; j += stride) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) acc += static_cast<double>(term(i, j));
    out[j] = static_cast<float>(out[j] + acc);
  }
}

// src[i, j] of a row-major [rows, cols] matrix.
struct matrix_term {
  const float* src;
  std::int64_t cols;
  __device__ float operator()(std::int64_t i, std::int64_t j) const { return src[i * cols + j]; }
};

template <class Term>
void launch_column_sums(cudaStream_t stream, std::int64_t rows, std::int64_t cols, Term term, float* out) {
  if (cols == 0) return;
  const unsigned blocks = blocks_for((cols + cuda_nn_block - 1) / cuda_nn_block);
  column_sums_kernel<cuda_nn_block><<<blocks, cuda_nn_block, 0, stream>>>(rows, cols, term, out);
  STRATA_CHECK_CUDA(cudaGetLastError());
}

// ---- means ---------------------------------------------------------------------------

// *out = mean of term(i) over i < n, summed in double by one block: each thread sums a
// fixed stride of terms, then CUB's block reduction combines them in a fixed tree. One
// block is enough for a loss (one value per row or element, read once).
template <int Block, class Term>
__global__ void __launch_bounds__(Block) mean_kernel(std::int64_t n, Term term, float* out) {
  using reduce = cub::BlockReduce<double, Block>;
  __shared__ typename reduce::TempStorage temp;
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += Block) s += term(i);
  s = reduce(temp).Sum(s);
  if (threadIdx.x == 0) *out = n ? static_cast<float>(s / static_cast<double>(n)) : 0.0f;
}

template <class Term>
void launch_mean(cudaStream_t stream, std::int64_t n, Term term, float* out) {
  mean_kernel<cuda_nn_block><<<1, cuda_nn_block, 0, stream>>>(n, term, out);
  STRATA_CHECK_CUDA(cudaGetLastError());
}

struct row_loss_term {
  const double* row_loss;
  __device__ double operator()(std::int64_t i) const { return row_loss[i]; }
};
struct square_term {
  const float* d;
  __device__ double operator()(std::int64_t i) const { return static_cast<double>(d[i]) * d[i]; }
};

// ---- inputs checked on the device ----------------------------------------------------

// Whether a float holds a class or token id in [0, limit): a whole number in range. The
// host layers' test, so both spaces refuse the same inputs.
__device__ inline bool is_id(float v, std::int64_t limit) {
  return v >= 0.0f && v < static_cast<float>(limit) && v == floorf(v);
}

// Marks position i as bad: *flag keeps the smallest such position (atomicMin on an
// integer is order-free, so the result is deterministic).
__device__ inline void flag_bad(unsigned long long* flag, std::int64_t i) {
  atomicMin(flag, static_cast<unsigned long long>(i));
}

// Before a checking kernel: all bits set, larger than every position, so atomicMin finds
// the first.
inline void arm_flag(cudaStream_t stream, unsigned long long* flag) {
  STRATA_CHECK_CUDA(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), stream));
}

// After it: waits for the stream (only the host can throw, and a bad input must throw
// before anything uses the result), then reads the first bad position below n and the
// value found there.
inline target_check read_flag(cudaStream_t stream, const unsigned long long* flag, const float* values,
                              std::int64_t n) {
  unsigned long long first_bad = 0;
  STRATA_CHECK_CUDA(cudaMemcpyAsync(&first_bad, flag, sizeof first_bad, cudaMemcpyDeviceToHost, stream));
  wait_stream(stream);  // not a hang if a peer failed
  target_check check;
  if (first_bad < static_cast<unsigned long long>(n)) [[unlikely]] {
    check.row = static_cast<std::int64_t>(first_bad);
    STRATA_CHECK_CUDA(
        cudaMemcpyAsync(&check.value, values + check.row, sizeof check.value, cudaMemcpyDeviceToHost, stream));
    wait_stream(stream);  // not a hang if a peer failed
  }
  return check;
}

// ---- cuBLAS ---------------------------------------------------------------------------

// cuBLAS takes int extents: refuse what would silently wrap (the message is built only
// on failure).
inline void require_int_extents(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                                std::int64_t ldc) {
  const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
  if (!(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc))) [[unlikely]]
    strata::expects<config_error>(false, strata::detail::cat("gemm: extents m=", m, " n=", n, " k=", k,
                                                             " exceed the 32-bit range of cuBLAS"));
}

// cuBLAS rejects leading dimensions below 1 even when k == 0 and nothing is read.
inline int cublas_ld(std::int64_t v) { return static_cast<int>(v < 1 ? 1 : v); }

}  // namespace strata::nn::detail
