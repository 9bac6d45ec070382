// The products of a linear layer on a (slice of a) weight, in any space: shared by
// nn::linear and the column- and row-parallel linears of nn/tp/.
#pragma once
#include <cstdint>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../space/ops.hpp"
#include "../context.hpp"

namespace strata::nn::detail {

// src[i, j] of a row-major [rows, cols] matrix (float or 16-bit): the term of a plain
// column sum.
template <class T = float>
struct matrix_term {
  const T* src;
  std::int64_t cols;
  STRATA_HOST_DEVICE float operator()(std::int64_t i, std::int64_t j) const {
    return static_cast<float>(src[i * cols + j]);
  }
};

// y[r, :] = x[r, :] + row for every r (x may be y); row of the weight type W, x and y
// of the activation type T (the sum in float, rounded once).
template <class W = float, class T = float>
struct add_row_fn {
  const T* x;
  const W* row;
  T* y;
  std::int64_t cols;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& r, std::int64_t i) const {
    const T* xi = x + i * cols;
    T* yi = y + i * cols;
    r.for_each(cols,
               [&](std::int64_t j) { yi[j] = round_to<T>(static_cast<float>(xi[j]) + static_cast<float>(row[j])); });
  }
};

// y[rows, out] = x[rows, in] W[out, in]^T (+ b[out] when b is not null); W and b as the
// context stores weights (nn::weights_of), x and y as it passes activations.
template <class Ctx, class T>
void linear_forward(Ctx& ctx, const T* x, std::int64_t rows, std::int64_t in, const weight_of<Ctx>* w, std::int64_t out,
                    const weight_of<Ctx>* b, T* y) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  // The bias in the GEMM's epilogue where the space fuses it (cuBLASLt); else broadcast
  // into y and the GEMM adds onto it (beta = 1), which saves a pass over a separate add.
  if (b && ops::gemm_fused(exec, transpose::no, transpose::yes, rows, out, in, x, in, w, in, y, out,
                           gemm_epilogue<weight_of<Ctx>, T>{epilogue::bias, b}))
    return;
  if (b) ops::broadcast_rows(exec, rows, out, b, y);
  ops::gemm(exec, transpose::no, transpose::yes, rows, out, in, 1.0f, x, in, w, in, b ? 1.0f : 0.0f, y, out);
}

// u[rows, out] = x[rows, in] W^T + b (GELU's input, kept) and g = gelu(u) in the tanh form,
// one GEMM where the space fuses bias and GELU into it: true; else false, nothing done.
template <class Ctx, class T>
bool linear_gelu_forward(Ctx& ctx, const T* x, std::int64_t rows, std::int64_t in, const weight_of<Ctx>* w,
                         std::int64_t out, const weight_of<Ctx>* b, T* u, T* g) {
  return ops_of<Ctx>::gemm_fused(exec_of(ctx), transpose::no, transpose::yes, rows, out, in, x, in, w, in, g, out,
                                 gemm_epilogue<weight_of<Ctx>, T>{epilogue::gelu_bias, b, u});
}

// dx[rows, in] = (dy W) gelu'(u), tanh form: the gradient of GELU's input u where GELU's
// output fed this linear; one GEMM where the space fuses GELU's gradient: true; else
// false, nothing done.
template <class Ctx, class T>
bool linear_input_grad_dgelu(Ctx& ctx, const T* dy, std::int64_t rows, std::int64_t out, const weight_of<Ctx>* w,
                             std::int64_t in, const T* u, T* dx) {
  return ops_of<Ctx>::gemm_fused(exec_of(ctx), transpose::no, transpose::no, rows, in, out, dy, out, w, in, dx, in,
                                 gemm_epilogue<weight_of<Ctx>, T>{epilogue::dgelu, nullptr, nullptr, u});
}

// dx[rows, in] = dy[rows, out] W[out, in], or with accumulate dx += dy W (the GEMM adds
// onto dx, beta = 1: linears that read one input sum their input gradients without a
// separate add).
template <class Ctx, class T>
void linear_input_grad(Ctx& ctx, const T* dy, std::int64_t rows, std::int64_t out, const weight_of<Ctx>* w,
                       std::int64_t in, T* dx, bool accumulate = false) {
  ops_of<Ctx>::gemm(exec_of(ctx), transpose::no, transpose::no, rows, in, out, 1.0f, dy, out, w, in,
                    accumulate ? 1.0f : 0.0f, dx, in);
}

// gw[out, in] += dy^T x; gb[out] += column sums of dy (when gb is not null). The
// gradients are float whatever the activations.
template <class Ctx, class T>
void linear_param_grads(Ctx& ctx, const T* dy, const T* x, std::int64_t rows, std::int64_t out, std::int64_t in,
                        float* gw, float* gb) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  ops::gemm(exec, transpose::yes, transpose::no, out, in, rows, 1.0f, dy, out, x, in, 1.0f, gw, in);
  if (gb) ops::add_column_sums(exec, rows, out, matrix_term<T>{dy, out}, gb);
}

// y[rows, cols] += row[cols] (a row-parallel bias once the partial products are summed;
// a position table).
template <class Ctx, class T>
void add_rows(Ctx& ctx, std::int64_t rows, std::int64_t cols, const T* x, const weight_of<Ctx>* row, T* y) {
  ops_of<Ctx>::rows(exec_of(ctx), rows, cols, add_row_fn<weight_of<Ctx>, T>{x, row, y, cols});
}

}  // namespace strata::nn::detail
