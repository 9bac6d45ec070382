// The GEMMs of a linear layer on a slice of its weight, shared by the column- and
// row-parallel layers, and the block transposes that turn an all_gather along the
// rank dimension into a concatenation along the feature dimension. Each runs in the
// context's space: BLAS and loops on the host, nn::detail::device_ops elsewhere.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../../nn/detail/blas.hpp"
#include "../../nn/detail/device_ops.hpp"
#include "../../nn/detail/loops.hpp"
#include "../../space/host.hpp"
#include "../../space/tensor.hpp"

namespace strata::detail {

template <class Ctx>
inline constexpr bool in_host_space = std::is_same_v<space_of<Ctx>, host>;

// y[rows, out] = x[rows, in] W[out, in]^T (+ b[out] when b is not null).
template <class Ctx>
void linear_forward(Ctx& ctx, const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                    const float* b, float* y) {
  using nn::detail::transpose;
  // Broadcasting b into y and letting the GEMM add onto it (beta = 1) saves a pass.
  const float beta = b ? 1.0f : 0.0f;
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    if (b)
      nn::detail::for_rows(rows, out, [&](std::int64_t r) { std::memcpy(y + r * out, b, out * sizeof(float)); });
    nn::detail::gemm(host{}, transpose::no, transpose::yes, rows, out, in, 1.0f, x, in, w, in, beta, y, out);
  } else {
    using ops = nn::detail::device_ops_for<space_of<Ctx>>;
    if (b) ops::broadcast_rows(ctx.exec(), rows, out, b, y);
    ops::gemm(ctx.exec(), transpose::no, transpose::yes, rows, out, in, 1.0f, x, in, w, in, beta, y, out);
  }
}

// dx[rows, in] = dy[rows, out] W[out, in].
template <class Ctx>
void linear_input_grad(Ctx& ctx, const float* dy, std::int64_t rows, std::int64_t out, const float* w,
                       std::int64_t in, float* dx) {
  using nn::detail::transpose;
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    nn::detail::gemm(host{}, transpose::no, transpose::no, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
  } else {
    nn::detail::device_ops_for<space_of<Ctx>>::gemm(ctx.exec(), transpose::no, transpose::no, rows, in, out, 1.0f, dy,
                                                    out, w, in, 0.0f, dx, in);
  }
}

// gw[out, in] += dy^T x; gb[out] += column sums of dy (when gb is not null).
template <class Ctx>
void linear_param_grads(Ctx& ctx, const float* dy, const float* x, std::int64_t rows, std::int64_t out,
                        std::int64_t in, float* gw, float* gb) {
  using nn::detail::transpose;
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    nn::detail::gemm(host{}, transpose::yes, transpose::no, out, in, rows, 1.0f, dy, out, x, in, 1.0f, gw, in);
    if (gb)
      nn::detail::add_column_sums(rows, out, gb,
                                  [dy, out](std::int64_t i, std::int64_t j) { return dy[i * out + j]; });
  } else {
    using ops = nn::detail::device_ops_for<space_of<Ctx>>;
    ops::gemm(ctx.exec(), transpose::yes, transpose::no, out, in, rows, 1.0f, dy, out, x, in, 1.0f, gw, in);
    if (gb) ops::add_column_sums(ctx.exec(), rows, out, dy, gb);
  }
}

// y[rows, out] += b[out] (a row-parallel bias, once the partial products are summed).
template <class Ctx>
void add_bias(Ctx& ctx, std::int64_t rows, std::int64_t out, const float* b, float* y) {
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    nn::detail::for_rows(rows, out, [&](std::int64_t r) {
#pragma omp simd
      for (std::int64_t j = 0; j < out; ++j) y[r * out + j] += b[j];
    });
  } else {
    nn::detail::device_ops_for<space_of<Ctx>>::add_rows(ctx.exec(), rows, out, y, b, y);
  }
}

// blocks[p][rows][cols] (what all_gather returns) -> y[rows][p * cols].
template <class Ctx>
void concat_blocks(Ctx& ctx, const float* blocks, int p, std::int64_t rows, std::int64_t cols, float* y) {
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    const std::int64_t width = cols * p;
    nn::detail::for_rows(rows, width, [&](std::int64_t r) {
      for (int k = 0; k < p; ++k)
        std::memcpy(y + r * width + k * cols, blocks + (k * rows + r) * cols, cols * sizeof(float));
    });
  } else {
    nn::detail::device_ops_for<space_of<Ctx>>::concat_blocks(ctx.exec(), blocks, p, rows, cols, y);
  }
}

// Columns [k * cols, (k + 1) * cols) of y[rows][p * cols] -> out[rows][cols].
template <class Ctx>
void take_block(Ctx& ctx, const float* y, int p, int k, std::int64_t rows, std::int64_t cols, float* out) {
  if constexpr (in_host_space<Ctx>) {
    (void)ctx;
    const std::int64_t width = cols * p;
    nn::detail::for_rows(rows, cols, [&](std::int64_t r) {
      std::memcpy(out + r * cols, y + r * width + k * cols, cols * sizeof(float));
    });
  } else {
    nn::detail::device_ops_for<space_of<Ctx>>::take_block(ctx.exec(), y, p, k, rows, cols, out);
  }
}

}  // namespace strata::detail
