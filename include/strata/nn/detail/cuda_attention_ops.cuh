// The CUDA kernels of causal self-attention, as the cuda_attention_ops part of
// device_ops<cuda>: strided batched cuBLAS GEMMs over heads (or batch rows), and the
// masked softmax and its backward with one block per row, in a fixed order.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cub/block/block_reduce.cuh>

#include "../../space/cuda.hpp"
#include "../../space/detail/cublas_check.hpp"
#include "blas.hpp"
#include "cuda_common.cuh"

namespace strata::nn::detail {

// Row i of each [S, S] score matrix in place: softmax over columns 0..i (the host's
// causal_softmax_row: max, float exps summed in double, times the float inverse), zeros
// after. rows = count * S; matrix q starts at p + q * stride.
template <int Block>
__global__ void __launch_bounds__(Block)
    causal_softmax_kernel(std::int64_t rows, std::int64_t S, float* p, std::int64_t stride) {
  using reduce = row_reduce<Block>;
  __shared__ typename reduce::storage shared;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t i = r % S;
    float* row = p + (r / S) * stride + i * S;
    const float m = reduce::max(shared, row, i + 1);
    double sum = 0.0;
    for (std::int64_t j = threadIdx.x; j <= i; j += Block) {
      const float e = std::exp(row[j] - m);
      row[j] = e;
      sum += e;
    }
    sum = reduce::sum(shared, sum);
    if (threadIdx.x == 0) shared.sum = sum;
    __syncthreads();
    const float inv = static_cast<float>(1.0 / shared.sum);
    for (std::int64_t j = threadIdx.x; j < S; j += Block) row[j] = j <= i ? row[j] * inv : 0.0f;
    __syncthreads();  // before the next row reuses temp and the shared values
  }
}

// d = P (d - rowsum(P d)) on row i's columns 0..i, zeros after (the host's
// softmax_backward_row). Products of two floats are exact in double, so only the
// summation order differs from the host.
template <int Block>
__global__ void __launch_bounds__(Block)
    causal_softmax_backward_kernel(std::int64_t rows, std::int64_t S, const float* p, std::int64_t p_stride, float* d,
                                   std::int64_t d_stride) {
  using sum_reduce = cub::BlockReduce<double, Block>;
  __shared__ typename sum_reduce::TempStorage temp;
  __shared__ double shared_dot;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t i = r % S;
    const float* pr = p + (r / S) * p_stride + i * S;
    float* dr = d + (r / S) * d_stride + i * S;
    double dot = 0.0;
    for (std::int64_t j = threadIdx.x; j <= i; j += Block) dot += static_cast<double>(pr[j]) * dr[j];
    dot = sum_reduce(temp).Sum(dot);
    if (threadIdx.x == 0) shared_dot = dot;
    __syncthreads();
    const float fdot = static_cast<float>(shared_dot);
    for (std::int64_t j = threadIdx.x; j < S; j += Block) dr[j] = j <= i ? pr[j] * (dr[j] - fdot) : 0.0f;
    __syncthreads();  // before the next row reuses temp and shared_dot
  }
}

// ---- the part of device_ops<cuda> ------------------------------------------------------

struct cuda_attention_ops {
  using exec_type = executor<strata::cuda>;

  // For q < batch: C_q = alpha op(A_q) op(B_q) + beta C_q, row-major, with X_q = x + q
  // stride_x (the layout of gemm in device_ops<cuda>, one cuBLAS call for all q).
  static void gemm_strided_batched(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                   std::int64_t k, float alpha, const float* a, std::int64_t lda,
                                   std::int64_t stride_a, const float* b, std::int64_t ldb, std::int64_t stride_b,
                                   float beta, float* c, std::int64_t ldc, std::int64_t stride_c,
                                   std::int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    require_int_extents(m, n, k, lda, ldb, ldc);
    require_int_extents(batch, 0, 0, 0, 0, 0);
    const auto op = [](transpose t) { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; };
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: A and B swap.
    STRATA_CHECK_CUBLAS(cublasSgemmStridedBatched(
        exec.blas, op(tb), op(ta), static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
        cublas_ld(ldb), static_cast<long long>(stride_b), a, cublas_ld(lda), static_cast<long long>(stride_a), &beta,
        c, cublas_ld(ldc), static_cast<long long>(stride_c), static_cast<int>(batch)));
  }

  // The causal softmax of `count` [S, S] score matrices in place, matrix q at p + q stride.
  static void causal_softmax_forward(const exec_type& exec, std::int64_t count, std::int64_t S, float* p,
                                     std::int64_t stride) {
    const std::int64_t rows = count * S;
    if (rows == 0) return;
    causal_softmax_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(rows, S, p, stride);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }

  // d_q = P_q (d_q - rowsum(P_q d_q)) for `count` [S, S] matrices, in place in d.
  static void causal_softmax_backward(const exec_type& exec, std::int64_t count, std::int64_t S, const float* p,
                                      std::int64_t p_stride, float* d, std::int64_t d_stride) {
    const std::int64_t rows = count * S;
    if (rows == 0) return;
    causal_softmax_backward_kernel<cuda_nn_block><<<blocks_for(rows), cuda_nn_block, 0, exec.stream>>>(
        rows, S, p, p_stride, d, d_stride);
    STRATA_CHECK_CUDA(cudaGetLastError());
  }
};

}  // namespace strata::nn::detail
