// The nn/ layers' CUDA kernels (device_ops<cuda>): cuBLAS GEMMs, elementwise activations
// on run_cuda, and row, column and loss reductions in a fixed order (no float atomics).
// The layer_norm, embedding, residual and attention kernels are parts of it kept in
// cuda_layer_ops.cuh and cuda_attention_ops.cuh.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "../../kernels/cuda_driver.cuh"
#include "../../space/cuda.hpp"
#include "../../space/detail/cublas_check.hpp"
#include "../gelu.hpp"
#include "blas.hpp"
#include "cuda_attention_ops.cuh"
#include "cuda_common.cuh"
#include "cuda_layer_ops.cuh"
#include "device_ops.hpp"

namespace strata::nn::detail {

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

// ---- cross-entropy --------------------------------------------------------------------

// One block per row: the row max, sum of exp(x - m) in double, and the row's loss. A
// target that is not a class id flags its row (flag_bad: the smallest such row) and is
// never used as an index; its row's loss is 0 and the forward throws once the host has
// read the flag.
template <int Block>
__global__ void __launch_bounds__(Block)
    cross_entropy_rows_kernel(std::int64_t rows, std::int64_t classes, const float* logits, const float* targets,
                              float* row_max, float* log_sum, float* target_out, double* row_loss,
                              unsigned long long* bad_row) {
  using reduce = row_reduce<Block>;
  __shared__ typename reduce::storage shared;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    const float m = reduce::max(shared, xr, classes);
    double se = 0.0;
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) se += std::exp(xr[j] - m);
    se = reduce::sum(shared, se);
    if (threadIdx.x == 0) {
      const double ls = std::log(se);
      const float t = targets[r];
      const bool valid = is_id(t, classes);
      if (!valid) flag_bad(bad_row, r);
      row_max[r] = m;
      log_sum[r] = static_cast<float>(ls);
      target_out[r] = valid ? t : 0.0f;
      row_loss[r] = valid ? (static_cast<double>(m) - static_cast<double>(xr[static_cast<std::int64_t>(t)])) + ls
                          : 0.0;
    }
    __syncthreads();  // before the next row reuses temp and the row max
  }
}

// dx = dy[0] / rows * (softmax(x) - onehot(target)) on columns [lo, lo + classes) of the
// vocabulary (lo = 0 without tensor parallelism), one block per row, with the host's
// expressions (launched only for rows > 0). The target is compared, never used as an
// index.
template <int Block>
__global__ void __launch_bounds__(Block)
    cross_entropy_backward_kernel(std::int64_t rows, std::int64_t classes, std::int64_t lo, const float* logits,
                                  const float* row_max, const float* log_sum, const float* target, const float* dy,
                                  float* dx) {
  const float scale = dy[0] / static_cast<float>(rows);
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    float* dr = dx + r * classes;
    const float m = row_max[r], l = log_sum[r];
    const std::int64_t t = static_cast<std::int64_t>(target[r]) - lo;
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) {
      float v = scale * std::exp((xr[j] - m) - l);
      if (j == t) v -= scale;
      dr[j] = v;
    }
  }
}

// Vocabulary-parallel cross-entropy, step 1, one block per row of this rank's logits:
// the local row max, the target checked against the full vocabulary and copied.
template <int Block>
__global__ void __launch_bounds__(Block)
    vocab_rows_kernel(std::int64_t rows, std::int64_t classes, std::int64_t vocab, const float* logits,
                      const float* targets, float* row_max, float* target_out, unsigned long long* bad_row) {
  using max_reduce = cub::BlockReduce<float, Block>;
  __shared__ typename max_reduce::TempStorage temp;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    float m = xr[0];
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) m = xr[j] > m ? xr[j] : m;
    m = max_reduce(temp).Reduce(m, max_op{});
    if (threadIdx.x == 0) {
      const float t = targets[r];
      if (!is_id(t, vocab)) flag_bad(bad_row, r);
      row_max[r] = m;
      target_out[r] = t;
    }
    __syncthreads();  // before the next row reuses temp
  }
}

// Step 2, after the row maxima are global: sums[r] = sum of exp(x - m) over this rank's
// columns in double, sums[rows + r] = the target's logit where this rank holds it, else 0.
template <int Block>
__global__ void __launch_bounds__(Block)
    vocab_sums_kernel(std::int64_t rows, std::int64_t classes, std::int64_t lo, const float* logits,
                      const float* row_max, const float* target, double* sums) {
  using sum_reduce = cub::BlockReduce<double, Block>;
  __shared__ typename sum_reduce::TempStorage temp;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = logits + r * classes;
    const float m = row_max[r];
    double se = 0.0;
    for (std::int64_t j = threadIdx.x; j < classes; j += Block) se += std::exp(xr[j] - m);
    se = sum_reduce(temp).Sum(se);
    if (threadIdx.x == 0) {
      const std::int64_t t = static_cast<std::int64_t>(target[r]) - lo;
      sums[r] = se;
      sums[rows + r] = t >= 0 && t < classes ? static_cast<double>(xr[t]) : 0.0;
    }
    __syncthreads();  // before the next row reuses temp
  }
}

// Step 3, after the sums are global: each row's log-sum and loss (the host's expressions).
struct vocab_finish_op {
  const float* row_max;
  const double* sums;
  float* log_sum;
  double* row_loss;
  std::size_t rows;
  __device__ void operator()(std::size_t r) const {
    const double ls = std::log(sums[r]);
    log_sum[r] = static_cast<float>(ls);
    row_loss[r] = (static_cast<double>(row_max[r]) - sums[rows + r]) + ls;
  }
};

// ---- the CUDA space's layer operations ---------------------------------------------

template <>
struct device_ops<strata::cuda> : cuda_layer_ops, cuda_attention_ops {
  using exec_type = executor<strata::cuda>;

  // C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, all row-major, on exec.stream
  // through exec.blas (whose pointer mode must be host, cuBLAS's default). cuBLAS is
  // column-major, where a row-major matrix reads as its transpose: C^T = op(B)^T op(A)^T
  // is the same call with A and B (and m and n) swapped and the same transpose flags.
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                   std::int64_t k, float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                   float beta, float* c, std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    require_int_extents(m, n, k, lda, ldb, ldc);
    const auto op = [](transpose t) { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    STRATA_CHECK_CUBLAS(cublasSgemm(exec.blas, op(tb), op(ta), static_cast<int>(n), static_cast<int>(m),
                                    static_cast<int>(k), &alpha, b, cublas_ld(ldb), a, cublas_ld(lda), &beta, c,
                                    cublas_ld(ldc)));
  }

  // out[r, :] = row for every r < rows.
  static void broadcast_rows(const exec_type& exec, std::int64_t rows, std::int64_t cols, const float* row,
                             float* out) {
    if (rows == 0 || cols == 0) return;
    kernels::run_cuda(static_cast<std::size_t>(rows * cols),
                      broadcast_rows_op{row, out, static_cast<std::size_t>(cols)}, exec.stream);
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
    arm_flag(exec.stream, bad_row);
    if (rows > 0) {
      cross_entropy_rows_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
          rows, classes, logits, targets, row_max, log_sum, target_out, row_loss, bad_row);
      STRATA_CHECK_CUDA(cudaGetLastError());
    }
    launch_mean(exec.stream, rows, row_loss_term{row_loss}, y);
    return read_flag(exec.stream, bad_row, targets, rows);
  }

  // dx with dy[0] read on the device: the loss scale stays there.
  static void cross_entropy_backward(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                     const float* logits, const float* row_max, const float* log_sum,
                                     const float* target, const float* dy, float* dx) {
    vocab_cross_entropy_backward(exec, rows, classes, 0, logits, row_max, log_sum, target, dy, dx);
  }
  // The same on vocabulary columns [lo, lo + classes): this rank's slice of the logits.
  static void vocab_cross_entropy_backward(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                           std::int64_t lo, const float* logits, const float* row_max,
                                           const float* log_sum, const float* target, const float* dy, float* dx) {
    if (rows == 0) return;
    cross_entropy_backward_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
        rows, classes, lo, logits, row_max, log_sum, target, dy, dx);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }

  // Vocabulary-parallel cross-entropy in three steps around the layer's two all-reduces
  // (row maxima, then sums). Step 1 checks the targets against the full vocabulary and
  // waits for the stream, so that a bad target throws on every rank before any
  // collective; returns the first bad row.
  static target_check vocab_cross_entropy_rows(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                               std::int64_t vocab, const float* logits, const float* targets,
                                               float* row_max, float* target_out, unsigned long long* bad_row) {
    arm_flag(exec.stream, bad_row);
    if (rows > 0) {
      vocab_rows_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
          rows, classes, vocab, logits, targets, row_max, target_out, bad_row);
      STRATA_CHECK_CUDA(cudaGetLastError());
    }
    return read_flag(exec.stream, bad_row, targets, rows);
  }
  static void vocab_cross_entropy_sums(const exec_type& exec, std::int64_t rows, std::int64_t classes,
                                       std::int64_t lo, const float* logits, const float* row_max,
                                       const float* target, double* sums) {
    if (rows == 0) return;
    vocab_sums_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(rows, classes, lo, logits,
                                                                                          row_max, target, sums);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }
  // log_sum, the per-row losses and *y = their mean, without waiting.
  static void vocab_cross_entropy_finish(const exec_type& exec, std::int64_t rows, const float* row_max,
                                         const double* sums, float* log_sum, double* row_loss, float* y) {
    kernels::run_cuda(static_cast<std::size_t>(rows),
                      vocab_finish_op{row_max, sums, log_sum, row_loss, static_cast<std::size_t>(rows)},
                      exec.stream);
    launch_mean(exec.stream, rows, row_loss_term{row_loss}, y);
  }

  // diff = x - targets and *y = mean of diff^2 (device), without waiting.
  static void mse_forward(const exec_type& exec, std::int64_t n, const float* x, const float* targets, float* diff,
                          float* y) {
    kernels::run_cuda(static_cast<std::size_t>(n), difference_op{x, targets, diff}, exec.stream);
    launch_mean(exec.stream, n, square_term{diff}, y);
  }

  static void mse_backward(const exec_type& exec, std::int64_t n, const float* diff, const float* dy, float* dx) {
    kernels::run_cuda(static_cast<std::size_t>(n), mse_backward_op{diff, dy, dx, static_cast<std::size_t>(n)},
                      exec.stream);
  }
};

}  // namespace strata::nn::detail
