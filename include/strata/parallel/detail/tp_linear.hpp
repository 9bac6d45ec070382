// The GEMMs of a linear layer on a slice of its weight, shared by the column- and
// row-parallel layers, and the block transposes that turn an all_gather along the
// rank dimension into a concatenation along the feature dimension.
#pragma once
#include <cstdint>
#include <cstring>

#include "../../nn/detail/blas.hpp"
#include "../../nn/detail/loops.hpp"
#include "../../space/host.hpp"

namespace strata::detail {

// y[rows, out] = x[rows, in] W[out, in]^T (+ b[out] when b is not null).
inline void linear_forward(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                           const float* b, float* y) {
  float beta = 0.0f;
  if (b) {
    // Broadcasting b into y and letting the GEMM add onto it (beta = 1) saves a pass.
    nn::detail::for_rows(rows, out, [&](std::int64_t r) { std::memcpy(y + r * out, b, out * sizeof(float)); });
    beta = 1.0f;
  }
  using nn::detail::transpose;
  nn::detail::gemm(host{}, transpose::no, transpose::yes, rows, out, in, 1.0f, x, in, w, in, beta, y, out);
}

// dx[rows, in] = dy[rows, out] W[out, in].
inline void linear_input_grad(const float* dy, std::int64_t rows, std::int64_t out, const float* w, std::int64_t in,
                              float* dx) {
  using nn::detail::transpose;
  nn::detail::gemm(host{}, transpose::no, transpose::no, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}

// gw[out, in] += dy^T x; gb[out] += column sums of dy (when gb is not null).
inline void linear_param_grads(const float* dy, const float* x, std::int64_t rows, std::int64_t out, std::int64_t in,
                               float* gw, float* gb) {
  using nn::detail::transpose;
  nn::detail::gemm(host{}, transpose::yes, transpose::no, out, in, rows, 1.0f, dy, out, x, in, 1.0f, gw, in);
  if (gb)
    nn::detail::add_column_sums(rows, out, gb, [dy, out](std::int64_t i, std::int64_t j) { return dy[i * out + j]; });
}

// blocks[p][rows][cols] (what all_gather returns) -> y[rows][p * cols].
inline void concat_blocks(const float* blocks, int p, std::int64_t rows, std::int64_t cols, float* y) {
  const std::int64_t width = cols * p;
  nn::detail::for_rows(rows, width, [&](std::int64_t r) {
    for (int k = 0; k < p; ++k)
      std::memcpy(y + r * width + k * cols, blocks + (k * rows + r) * cols, cols * sizeof(float));
  });
}

// Columns [k * cols, (k + 1) * cols) of y[rows][p * cols] -> out[rows][cols].
inline void take_block(const float* y, int p, int k, std::int64_t rows, std::int64_t cols, float* out) {
  const std::int64_t width = cols * p;
  nn::detail::for_rows(
      rows, cols, [&](std::int64_t r) { std::memcpy(out + r * cols, y + r * width + k * cols, cols * sizeof(float)); });
}

}  // namespace strata::detail
