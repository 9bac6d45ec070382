// The CUDA kernels of layer_norm, the token and position embeddings, and the elementwise
// and block moves of residuals and tensor-parallel layers, as the cuda_layer_ops part of
// device_ops<cuda>. Every float expression is the host loop's, in a fixed order.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "../../kernels/cuda_driver.cuh"
#include "../../space/cuda.hpp"
#include "cuda_common.cuh"
#include "device_ops.hpp"

namespace strata::nn::detail {

// ---- elementwise functors (run by kernels::run_cuda) -------------------------------

struct add_into_op {
  float* a;
  const float* b;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { a[i] += b[i]; }
};

// y = x + row broadcast over rows (position table, a bias after an all-reduce); x may be y.
struct add_rows_op {
  const float* x;
  const float* row;
  float* y;
  std::size_t cols;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { y[i] = x[i] + row[i % cols]; }
};

// blocks[p][rows][cols] -> y[rows][p cols], over the elements of y.
struct concat_blocks_op {
  const float* blocks;
  float* y;
  std::size_t p, rows, cols;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    const std::size_t width = cols * p, r = i / width, k = (i % width) / cols, c = i % cols;
    y[i] = blocks[(k * rows + r) * cols + c];
  }
};

// Columns [k cols, (k + 1) cols) of y[rows][p cols] -> out[rows][cols].
struct take_block_op {
  const float* y;
  float* out;
  std::size_t p, k, cols;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    out[i] = y[(i / cols) * cols * p + k * cols + i % cols];
  }
};

// ---- layer_norm ------------------------------------------------------------------------

// One block per row: the mean and the variance in two passes in double (the host's
// method; only the summation order differs), then y with the host's float expression.
template <int Block>
__global__ void __launch_bounds__(Block)
    layer_norm_forward_kernel(std::int64_t rows, std::int64_t d, double eps, const float* x, const float* w,
                              const float* b, float* y, float* mean_out, float* rstd_out) {
  using reduce = cub::BlockReduce<double, Block>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ double shared_sum;
  const double inv_d = 1.0 / static_cast<double>(d);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * d;
    double s = 0.0;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) s += xr[j];
    s = reduce(temp).Sum(s);
    if (threadIdx.x == 0) shared_sum = s;
    __syncthreads();  // the sum is visible, and temp may be reused
    const double mean = shared_sum * inv_d;
    double v = 0.0;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) v += (xr[j] - mean) * (xr[j] - mean);
    v = reduce(temp).Sum(v);
    __syncthreads();  // every thread has read shared_sum before thread 0 overwrites it
    if (threadIdx.x == 0) shared_sum = v;
    __syncthreads();
    const float m = static_cast<float>(mean);
    const float rs = static_cast<float>(1.0 / sqrt(shared_sum * inv_d + eps));
    if (threadIdx.x == 0) {
      mean_out[r] = m;
      rstd_out[r] = rs;
    }
    float* yr = y + r * d;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    __syncthreads();  // before the next row reuses temp and shared_sum
  }
}

// One block per row: dx = rstd (g - mean(g) - xhat mean(g xhat)) with g = dy w, the two
// means summed in double.
template <int Block>
__global__ void __launch_bounds__(Block)
    layer_norm_backward_kernel(std::int64_t rows, std::int64_t d, const float* x, const float* dy, const float* w,
                               const float* mean, const float* rstd, float* dx) {
  using reduce = cub::BlockReduce<double, Block>;
  __shared__ typename reduce::TempStorage temp;
  __shared__ double shared_sg, shared_sgx;
  const double inv_d = 1.0 / static_cast<double>(d);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * d, *gr = dy + r * d;
    const float m = mean[r], rs = rstd[r];
    double sg = 0.0, sgx = 0.0;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) {
      const float gw = gr[j] * w[j];
      sg += gw;
      sgx += gw * ((xr[j] - m) * rs);
    }
    sg = reduce(temp).Sum(sg);
    __syncthreads();  // temp is reused by the second reduction
    sgx = reduce(temp).Sum(sgx);
    if (threadIdx.x == 0) {
      shared_sg = sg;
      shared_sgx = sgx;
    }
    __syncthreads();
    const float a = static_cast<float>(shared_sg * inv_d), bb = static_cast<float>(shared_sgx * inv_d);
    float* dxr = dx + r * d;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) dxr[j] = rs * (gr[j] * w[j] - a - (xr[j] - m) * rs * bb);
    __syncthreads();  // before the next row reuses temp and the shared sums
  }
}

// The weight gradient's term dy xhat, as the host forms it.
struct layer_norm_weight_term {
  const float *dy, *x, *mean, *rstd;
  std::int64_t d;
  __device__ float operator()(std::int64_t i, std::int64_t j) const {
    return dy[i * d + j] * ((x[i * d + j] - mean[i]) * rstd[i]);
  }
};

// ---- embeddings ----------------------------------------------------------------------

// One thread per token: flags the first id that is not a whole number in [0, vocab).
template <int Block>
__global__ void __launch_bounds__(Block)
    check_ids_kernel(std::int64_t n, std::int64_t vocab, const float* ids, unsigned long long* bad) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Block;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * Block + threadIdx.x; t < n; t += stride)
    if (!is_id(ids[t], vocab)) flag_bad(bad, t);
}

// y[t, :] = weight row id[t] - lo when this table holds it, else zeros (another tensor
// rank's row, or a bad id: never used as an index).
struct gather_rows_op {
  const float* ids;
  const float* w;
  float* y;
  std::size_t d;
  std::int64_t vocab, lo, local;
  __device__ void operator()(std::size_t i) const {
    const std::size_t t = i / d, j = i % d;
    const float id = ids[t];
    const std::int64_t row = is_id(id, vocab) ? static_cast<std::int64_t>(id) - lo : -1;
    y[i] = row >= 0 && row < local ? w[static_cast<std::size_t>(row) * d + j] : 0.0f;
  }
};

// grad[id[t] - lo, j] += dy[t, j] over tokens t in order. Thread (p, j) owns column j of
// the rows r with r % parts == p and walks every token: each element has one owner that
// adds in token order, the host's float sum, with no atomics; `parts` only spreads the
// rows over more threads.
template <int Block>
__global__ void __launch_bounds__(Block)
    scatter_rows_kernel(std::int64_t n, std::int64_t d, std::int64_t lo, std::int64_t local, std::int64_t parts,
                        const float* ids, const float* dy, float* grad) {
  const std::int64_t owners = parts * d, stride = static_cast<std::int64_t>(gridDim.x) * Block;
  for (std::int64_t o = static_cast<std::int64_t>(blockIdx.x) * Block + threadIdx.x; o < owners; o += stride) {
    const std::int64_t p = o / d, j = o % d;
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t row = static_cast<std::int64_t>(ids[t]) - lo;
      if (row < 0 || row >= local || row % parts != p) continue;
      grad[row * d + j] += dy[t * d + j];
    }
  }
}

// Owner threads the scatter aims for: a few per resident thread of a large GPU, so that
// each walks the tokens with 1/parts of the adds. More only rescan the ids.
inline constexpr std::int64_t cuda_scatter_owners = 1 << 18;

// ---- the part of device_ops<cuda> ------------------------------------------------------

struct cuda_layer_ops {
  using exec_type = executor<strata::cuda>;

  // Zeros, and copies within the device, queued on the stream (cuda::zero / copy would
  // wait on the legacy stream instead, unordered with the layers' stream).
  static void fill_zero(const exec_type& exec, float* p, std::int64_t n) {
    if (n > 0) STRATA_CHECK_CUDA(cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(float), exec.stream));
  }
  static void copy(const exec_type& exec, float* dst, const float* src, std::int64_t n) {
    if (n > 0)
      STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float),
                                        cudaMemcpyDeviceToDevice, exec.stream));
  }

  // a += b (residual connections).
  static void add_into(const exec_type& exec, std::int64_t n, float* a, const float* b) {
    kernels::run_cuda(static_cast<std::size_t>(n), add_into_op{a, b}, exec.stream);
  }
  // y[r, :] = x[r, :] + row for every r < rows; x may be y.
  static void add_rows(const exec_type& exec, std::int64_t rows, std::int64_t cols, const float* x, const float* row,
                       float* y) {
    if (rows == 0 || cols == 0) return;
    kernels::run_cuda(static_cast<std::size_t>(rows * cols),
                      add_rows_op{x, row, y, static_cast<std::size_t>(cols)}, exec.stream);
  }
  // out[j] += sum over rows of src[i, j], in the host's order.
  static void add_column_sums(const exec_type& exec, std::int64_t rows, std::int64_t cols, const float* src,
                              float* out) {
    launch_column_sums(exec.stream, rows, cols, matrix_term{src, cols}, out);
  }

  static void concat_blocks(const exec_type& exec, const float* blocks, int p, std::int64_t rows, std::int64_t cols,
                            float* y) {
    const auto n = static_cast<std::size_t>(rows * cols * p);
    if (n == 0) return;
    kernels::run_cuda(n,
                      concat_blocks_op{blocks, y, static_cast<std::size_t>(p), static_cast<std::size_t>(rows),
                                       static_cast<std::size_t>(cols)},
                      exec.stream);
  }
  static void take_block(const exec_type& exec, const float* y, int p, int k, std::int64_t rows, std::int64_t cols,
                         float* out) {
    const auto n = static_cast<std::size_t>(rows * cols);
    if (n == 0) return;
    kernels::run_cuda(n,
                      take_block_op{y, out, static_cast<std::size_t>(p), static_cast<std::size_t>(k),
                                    static_cast<std::size_t>(cols)},
                      exec.stream);
  }

  static void layer_norm_forward(const exec_type& exec, std::int64_t rows, std::int64_t d, float eps, const float* x,
                                 const float* w, const float* b, float* y, float* mean, float* rstd) {
    if (rows == 0) return;
    layer_norm_forward_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
        rows, d, static_cast<double>(eps), x, w, b, y, mean, rstd);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }
  // dx, then weight_grad += column sums of dy xhat and bias_grad += column sums of dy.
  static void layer_norm_backward(const exec_type& exec, std::int64_t rows, std::int64_t d, const float* x,
                                  const float* dy, const float* w, const float* mean, const float* rstd, float* dx,
                                  float* weight_grad, float* bias_grad) {
    if (rows > 0) {
      layer_norm_backward_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
          rows, d, x, dy, w, mean, rstd, dx);
      STRATA_CHECK_CUDA(cudaGetLastError());
    }
    launch_column_sums(exec.stream, rows, d, layer_norm_weight_term{dy, x, mean, rstd, d}, weight_grad);
    launch_column_sums(exec.stream, rows, d, matrix_term{dy, d}, bias_grad);
  }

  // y[t, :] = the table's row for ids[t] (rows [lo, lo + local) of a vocab-row table),
  // zeros for ids it does not hold. Checks every id against vocab and waits for the
  // stream: returns the first bad position and its id (row -1 when all are ids).
  static target_check embedding_forward(const exec_type& exec, std::int64_t n, std::int64_t d, std::int64_t vocab,
                                        std::int64_t lo, std::int64_t local, const float* ids, const float* w,
                                        float* y, unsigned long long* bad) {
    arm_flag(exec.stream, bad);
    if (n > 0) {
      check_ids_kernel<cuda_nn_block><<<blocks_for((n + cuda_nn_block - 1) / cuda_nn_block), cuda_nn_block, 0,
                                        exec.stream>>>(n, vocab, ids, bad);
      STRATA_CHECK_CUDA(cudaGetLastError());
      if (d > 0)
        kernels::run_cuda(static_cast<std::size_t>(n * d),
                          gather_rows_op{ids, w, y, static_cast<std::size_t>(d), vocab, lo, local}, exec.stream);
    }
    return read_flag(exec.stream, bad, ids, n);
  }

  // grad[ids[t] - lo, :] += dy[t, :] for the ids this table holds, in token order.
  static void embedding_backward(const exec_type& exec, std::int64_t n, std::int64_t d, std::int64_t lo,
                                 std::int64_t local, const float* ids, const float* dy, float* grad) {
    if (n == 0 || d == 0 || local == 0) return;
    const std::int64_t parts = std::max<std::int64_t>(1, std::min(local, cuda_scatter_owners / d));
    const std::int64_t owners = parts * d;
    scatter_rows_kernel<cuda_nn_block><<<blocks_for((owners + cuda_nn_block - 1) / cuda_nn_block), cuda_nn_block, 0,
                                         exec.stream>>>(n, d, lo, local, parts, ids, dy, grad);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }
};

}  // namespace strata::nn::detail
