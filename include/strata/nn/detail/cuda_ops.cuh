// The nn/ layers' CUDA kernels (device_ops<cuda>): cuBLAS GEMMs, elementwise activations
// on run_cuda, and row, column and loss reductions in a fixed order (no float atomics).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "../../kernels/cuda_driver.cuh"
#include "../../space/cuda.hpp"
#include "../../space/detail/cublas_check.hpp"
#include "../gelu.hpp"
#include "blas.hpp"
#include "device_ops.hpp"

namespace strata::nn::detail {

// Threads per block of the row and reduction kernels.
inline constexpr int cuda_nn_block = 256;
// Blocks of a kernel that loops over rows or column tiles: enough to fill any current GPU
// (132 SMs x 8 resident blocks of 256 threads) many times over; more would only add
// scheduling. Results do not depend on it: every row or column is one block's or
// thread's work, in a fixed order.
inline constexpr std::int64_t cuda_nn_max_blocks = 1 << 16;

// Kernels are templates (on the block size) so that this header can be included by
// several .cu files of one program without duplicate kernel symbols.

// ---- elementwise functors (run by kernels::run_cuda) -------------------------------

struct broadcast_rows_op {
  const float* row;
  float* out;
  std::size_t cols;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { out[i] = row[i % cols]; }
};

// The host loops' expressions, so that both spaces give the same bits.
struct relu_forward_op {
  const float* x;
  float* y;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
};
struct relu_backward_op {
  const float* x;
  const float* dy;
  float* dx;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { dx[i] = x[i] > 0.0f ? dy[i] : 0.0f; }
};

template <class Math>  // gelu_erf or gelu_tanh: the host's per-element math
struct gelu_forward_op {
  const float* x;
  float* y;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { y[i] = Math::value(x[i]); }
};
template <class Math>
struct gelu_backward_op {
  const float* x;
  const float* dy;
  float* dx;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { dx[i] = dy[i] * Math::derivative(x[i]); }
};

struct difference_op {
  const float* x;
  const float* t;
  float* d;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { d[i] = x[i] - t[i]; }
};

// dx = dy[0] * 2 diff / n with dy read on the device (launched only for n > 0). Every
// thread forms the scale the way the host does, so dx has the host's bits.
struct mse_backward_op {
  const float* diff;
  const float* dy;
  float* dx;
  std::size_t n;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    const float scale = 2.0f * dy[0] / static_cast<float>(n);
    dx[i] = scale * diff[i];
  }
};

// ---- reductions ----------------------------------------------------------------------

// out[j] += sum over rows of src[i, j]: one thread per column summing its rows in order,
// in double, as the host's add_column_sums does. The order is fixed (no atomics), so the
// bias gradient is the same bits run to run, and the same bits as on the host.
template <int Block>
__global__ void __launch_bounds__(Block)
    column_sums_kernel(std::int64_t rows, std::int64_t cols, const float* src, float* out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols; j += stride) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < rows; ++i) acc += static_cast<double>(src[i * cols + j]);
    out[j] = static_cast<float>(out[j] + acc);
  }
}

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

struct row_loss_term {
  const double* row_loss;
  __device__ double operator()(std::int64_t i) const { return row_loss[i]; }
};
struct square_term {
  const float* d;
  __device__ double operator()(std::int64_t i) const { return static_cast<double>(d[i]) * d[i]; }
};

// One block per row: the row max, sum of exp(x - m) in double, and the row's loss. A
// target that is not a class id records its row in *bad_row (the smallest such row, by
// atomicMin on an integer: order-free, so still deterministic) and is never used as an
// index; its row's loss is 0 and the forward throws once the host has read *bad_row.
// The row max, compared as the host's loop compares (x > m ? x : m).
struct max_op {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

template <int Block>
__global__ void __launch_bounds__(Block)
    cross_entropy_rows_kernel(std::int64_t rows, std::int64_t classes, const float* logits, const float* targets,
                              float* row_max, float* log_sum, float* target_out, double* row_loss,
                              unsigned long long* bad_row) {
  using max_reduce = cub::BlockReduce<float, Block>;
  using sum_reduce = cub::BlockReduce<double, Block>;
  __shared__ union {
    typename max_reduce::TempStorage max;
    typename sum_reduce::TempStorage sum;
  } temp;
  __shared__ float shared_max;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    float m = xr[0];
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) m = xr[j] > m ? xr[j] : m;
    m = max_reduce(temp.max).Reduce(m, max_op{});
    if (threadIdx.x == 0) shared_max = m;
    __syncthreads();  // shared_max is visible, and temp may be reused
    m = shared_max;
    double se = 0.0;
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) se += std::exp(xr[j] - m);
    se = sum_reduce(temp.sum).Sum(se);
    if (threadIdx.x == 0) {
      const double ls = std::log(se);
      const float t = targets[r];
      const bool valid = t >= 0.0f && t < static_cast<float>(classes) && t == std::floor(t);
      if (!valid) atomicMin(bad_row, static_cast<unsigned long long>(r));
      row_max[r] = m;
      log_sum[r] = static_cast<float>(ls);
      target_out[r] = valid ? t : 0.0f;
      row_loss[r] = valid ? (static_cast<double>(m) - static_cast<double>(xr[static_cast<std::int64_t>(t)])) + ls
                          : 0.0;
    }
    __syncthreads();  // before the next row reuses temp and shared_max
  }
}

// dx = dy[0] / rows * (softmax(x) - onehot(target)), one block per row, with the host's
// expressions (launched only for rows > 0). The target is compared, never used as an
// index.
template <int Block>
__global__ void __launch_bounds__(Block)
    cross_entropy_backward_kernel(std::int64_t rows, std::int64_t classes, const float* logits,
                                  const float* row_max, const float* log_sum, const float* target, const float* dy,
                                  float* dx) {
  const float scale = dy[0] / static_cast<float>(rows);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    float* dr = dx + r * classes;
    const float m = row_max[r], l = log_sum[r];
    const auto t = static_cast<std::int64_t>(target[r]);
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) {
      float v = scale * std::exp((xr[j] - m) - l);
      if (j == t) v -= scale;
      dr[j] = v;
    }
  }
}

// Blocks for a kernel whose blocks loop over `items` (rows or column tiles).
inline unsigned blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(items, cuda_nn_max_blocks)));
}

// ---- the CUDA space's layer operations ---------------------------------------------

template <>
struct device_ops<strata::cuda> {
  using exec_type = executor<strata::cuda>;

  // C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, all row-major, on exec.stream
  // through exec.blas (whose pointer mode must be host, cuBLAS's default). cuBLAS is
  // column-major, where a row-major matrix reads as its transpose: C^T = op(B)^T op(A)^T
  // is the same call with A and B (and m and n) swapped and the same transpose flags.
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                   std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                   float beta, float* c, std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    // cuBLAS takes int extents: refuse what would silently wrap (built only on failure).
    const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
    if (!(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc))) [[unlikely]]
      strata::expects<config_error>(false, strata::detail::cat("gemm: extents m=", m, " n=", n, " k=", k,
                                                               " exceed the 32-bit range of cuBLAS"));
    // cuBLAS rejects leading dimensions below 1 even when k == 0 and nothing is read.
    const auto ld = [](std::int64_t v) { return static_cast<int>(v < 1 ? 1 : v); };
    const auto op = [](transpose t) { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    STRATA_CHECK_CUBLAS(cublasSgemm(exec.blas, op(tb), op(ta), static_cast<int>(n), static_cast<int>(m),
                                    static_cast<int>(k), &alpha, b, ld(ldb), a, ld(lda), &beta, c, ld(ldc)));
  }

  // out[r, :] = row for every r < rows.
  static void broadcast_rows(const exec_type& exec, std::int64_t rows, std::int64_t cols, const float* row,
                             float* out) {
    if (rows == 0 || cols == 0) return;
    kernels::run_cuda(static_cast<std::size_t>(rows * cols),
                      broadcast_rows_op{row, out, static_cast<std::size_t>(cols)}, exec.stream);
  }

  // out[j] += sum over i < rows of src[i, j] (bias gradients), in the host's order.
  static void add_column_sums(const exec_type& exec, std::int64_t rows, std::int64_t cols, const float* src,
                              float* out) {
    if (cols == 0) return;
    const unsigned blocks = blocks_for((cols + cuda_nn_block - 1) / cuda_nn_block);
    column_sums_kernel<cuda_nn_block><<<blocks, cuda_nn_block, 0, exec.stream>>>(rows, cols, src, out);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }

  static void relu_forward(const exec_type& exec, std::int64_t n, const float* x, float* y) {
    kernels::run_cuda(static_cast<std::size_t>(n), relu_forward_op{x, y}, exec.stream);
  }
  static void relu_backward(const exec_type& exec, std::int64_t n, const float* x, const float* dy, float* dx) {
    kernels::run_cuda(static_cast<std::size_t>(n), relu_backward_op{x, dy, dx}, exec.stream);
  }

  static void gelu_forward(const exec_type& exec, gelu_approximation approximate, std::int64_t n, const float* x,
                           float* y) {
    const auto count = static_cast<std::size_t>(n);
    if (approximate == gelu_approximation::tanh)
      kernels::run_cuda(count, gelu_forward_op<gelu_tanh>{x, y}, exec.stream);
    else
      kernels::run_cuda(count, gelu_forward_op<gelu_erf>{x, y}, exec.stream);
  }
  static void gelu_backward(const exec_type& exec, gelu_approximation approximate, std::int64_t n, const float* x,
                            const float* dy, float* dx) {
    const auto count = static_cast<std::size_t>(n);
    if (approximate == gelu_approximation::tanh)
      kernels::run_cuda(count, gelu_backward_op<gelu_tanh>{x, dy, dx}, exec.stream);
    else
      kernels::run_cuda(count, gelu_backward_op<gelu_erf>{x, dy, dx}, exec.stream);
  }

  // The cross-entropy forward over [rows, classes] logits into the cache's per-row
  // buffers and *y (device). It waits for the stream: a bad target must throw before
  // anything uses the loss, and only the host can throw. Returns the first bad row.
  static target_check cross_entropy_forward(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                            const float* logits, const float* targets, float* row_max,
                                            float* log_sum, float* target_out, double* row_loss,
                                            unsigned long long* bad_row, float* y) {
    // All bits set: "no bad row" is larger than every row, so atomicMin finds the first.
    STRATA_CHECK_CUDA(cudaMemsetAsync(bad_row, 0xff, sizeof(unsigned long long), exec.stream));
    if (rows > 0) {
      cross_entropy_rows_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
          rows, classes, logits, targets, row_max, log_sum, target_out, row_loss, bad_row);
      STRATA_CHECK_CUDA(cudaGetLastError());
    }
    mean_kernel<cuda_nn_block><<<1, cuda_nn_block, 0, exec.stream>>>(rows, row_loss_term{row_loss}, y);
    STRATA_CHECK_CUDA(cudaGetLastError());
    unsigned long long first_bad = 0;
    STRATA_CHECK_CUDA(
        cudaMemcpyAsync(&first_bad, bad_row, sizeof first_bad, cudaMemcpyDeviceToHost, exec.stream));
    STRATA_CHECK_CUDA(cudaStreamSynchronize(exec.stream));
    target_check check;
    if (first_bad < static_cast<unsigned long long>(rows)) [[unlikely]] {
      check.row = static_cast<std::int64_t>(first_bad);
      STRATA_CHECK_CUDA(cudaMemcpyAsync(&check.value, targets + check.row, sizeof check.value,
                                        cudaMemcpyDeviceToHost, exec.stream));
      STRATA_CHECK_CUDA(cudaStreamSynchronize(exec.stream));
    }
    return check;
  }

  static void cross_entropy_backward(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                     const float* logits, const float* row_max, const float* log_sum,
                                     const float* target, const float* dy, float* dx) {
    if (rows == 0) return;
    cross_entropy_backward_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
        rows, classes, logits, row_max, log_sum, target, dy, dx);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }

  // diff = x - targets and *y = mean of diff^2 (device), without waiting.
  static void mse_forward(const exec_type& exec, std::int64_t n, const float* x, const float* targets, float* diff,
                          float* y) {
    kernels::run_cuda(static_cast<std::size_t>(n), difference_op{x, targets, diff}, exec.stream);
    mean_kernel<cuda_nn_block><<<1, cuda_nn_block, 0, exec.stream>>>(n, square_term{diff}, y);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }

  static void mse_backward(const exec_type& exec, std::int64_t n, const float* diff, const float* dy, float* dx) {
    kernels::run_cuda(static_cast<std::size_t>(n), mse_backward_op{diff, dy, dx, static_cast<std::size_t>(n)},
                      exec.stream);
  }
};

}  // namespace strata::nn::detail
