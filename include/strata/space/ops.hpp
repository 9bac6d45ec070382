// The operations by space that layers are written against, once: ops<Space> holds GEMMs,
// elementwise maps and per-row kernels over shared functors, and deterministic reductions.
#pragma once
#include <cstdint>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "host.hpp"
#include "tensor.hpp"

namespace strata {

// Whether a GEMM operand is used as stored (row-major) or transposed.
enum class transpose : bool { no = false, yes = true };

// What a fused GEMM (ops::gemm_fused) applies to the product P = op(A) op(B) as it writes
// C; GELU is its tanh form (nn::gelu_approximation::tanh).
enum class epilogue : unsigned char {
  bias,       // C = P + bias[j]
  gelu_bias,  // aux_out = P + bias[j] (GELU's input, kept for backward), C = gelu(aux_out)
  dgelu,      // C = P gelu'(aux_in): the gradient of GELU's input from its output's, P
};
// bias: [n] of the weight type W; aux_out and aux_in: [m, n] in C's layout.
template <class W, class T>
struct gemm_epilogue {
  epilogue kind = epilogue::bias;
  const W* bias = nullptr;
  T* aux_out = nullptr;
  const T* aux_in = nullptr;
};

// The first value of a checked array that is not an id in [0, limit) (a whole number in
// range), and that value: index -1 when every value is one.
struct id_check {
  std::int64_t index = -1;
  float value = 0.0f;
  explicit operator bool() const noexcept { return index >= 0; }
};

// The label a loss skips (PyTorch's and Hugging Face's ignore_index): a target of -100
// trains nothing and counts in neither the loss's sum nor its count.
inline constexpr float ignore_label = -100.0f;

// ops<Space>: the operations of one space, as static functions whose first argument is
// the space's executor (nothing on the host; stream and cuBLAS handle on a GPU). Each
// gives the same result in every space up to the order of its sums, and every order is
// fixed: the result never depends on thread counts or timing.
//
//   gemm(exec, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
//       C[m, n] = alpha op(A) op(B) + beta C, row-major; with beta 0, C is not read. B may
//       be of the context's weight type (nn::weights_of: 16-bit in a mixed GPU trainer).
//   gemm_strided_batched(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b,
//                        beta, c, ldc, stride_c, batch)
//       the same for batch matrices q, each X_q = x + q stride_x.
//   gemm_fused(exec, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, e) -> bool
//       C[m, n] = e applied to op(A) op(B) in one kernel, and true, where the space has one
//       for these types and this layout (cuBLASLt's epilogues on a GPU); else false with
//       nothing written, and the caller runs the same steps one by one (the host always).
//   map(exec, n, f)                    f(i) for i in [0, n), in any order.
//   rows(exec, rows, cols, f)          f(row, r) for r in [0, rows); cols is the row's
//                                      work, which decides on threads. See below.
//   add_column_sums(exec, rows, cols, term, out)
//       out[j] += sum over i of term(i, j) in double: the rows are cut into chunks of
//       detail::column_chunk_rows, each chunk summed over its rows in order, then the
//       chunks' sums added in chunk order (chunks fill a GPU where one column per thread
//       would not; every space adds in this order, so host and device agree bit for bit).
//   mean(exec, n, term, count, out)    *out = (sum of term(i) in double) / count, 0 when
//                                      count is 0 (count < n where terms are masked out).
//   check_ids(exec, n, limit, values, scratch, labels = false) -> id_check
//       the first value that is not an id in [0, limit) (nor ignore_label, with labels).
//       It waits for the space's queued work: a bad id must throw before anything uses
//       it. scratch (one element) is resized and used only where the values are not
//       readable by the host. A GPU trainer's context defers these checks instead
//       (deferred_id_checks below): queued, and read back once per step.
//   scatter_add_rows(exec, n, d, lo, local, ids, src, out)
//       out[ids[t] - lo, :] += src[t, :] for the ids in [lo, lo + local), in token order.
//   fill_zero, copy, broadcast_rows (out[r, :] = row, row of the weight type), add_into (a += b).
//   prefers_batched                    whether layers should batch small GEMMs into one
//                                      strided call (a GPU) or run them one by one (the host).
//
// Functors given to map and rows are written once for every space: copyable structs of
// pointers and sizes whose call operator is STRATA_HOST_DEVICE. A rows functor is
//
//   template <class Row>
//   STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const;
//
// and does its row's work through `row` (one thread on the host, a thread block on a GPU);
// STRATA_FORCEINLINE makes the host compile it into each instruction set's loop.
//   row.for_each(n, g)   g(j) for j in [0, n)
//   row.sum(n, g)        the sum of g(j) as double, given to every thread
//   row.max(n, g)        the max of g(j) (n >= 1, compared as x > m ? x : m), to every thread
//   row.once(g)          g() once for the row (thread 0 of the block)
//   row.sync()           a barrier among the row's threads (nothing on the host)
// Element j goes to the same thread in for_each, sum and max, so a pass may read what an
// earlier pass of the same row wrote at j; reading another element written earlier (or
// anything once wrote) needs row.sync() first.
template <class Space>
struct ops;

template <class T>
concept complete_type = requires { sizeof(T); };

namespace detail {
// add_column_sums' order, one definition for every space.
inline constexpr std::int64_t column_chunk_rows = 128;
constexpr std::int64_t column_chunks(std::int64_t rows) noexcept {
  return rows > 0 ? (rows + column_chunk_rows - 1) / column_chunk_rows : 0;
}

// ops<Space>, or one readable error where a .cpp uses a space whose operations live in
// CUDA headers (instead of "incomplete type" deep inside a layer).
template <class Space>
struct checked_ops {
  static_assert(complete_type<ops<Space>>,
                "strata: this space's operations are not included: for strata::cuda, include <strata/cuda.cuh> "
                "from a .cu translation unit");
  using type = ops<Space>;
};
}  // namespace detail

template <class Space>
using ops_for = typename detail::checked_ops<Space>::type;

// Id checks that wait for the end of a trainer's step instead of waiting for the device
// at each check: defined for strata::cuda (space/cuda_ops.cuh); the host reads its
// values where they are and has none.
template <class Space>
class deferred_id_checks;
// The operations of the space a context computes in.
template <class Ctx>
using ops_of = ops_for<space_of<Ctx>>;

// The executor a context carries (ctx.exec()), or the space's default one for a minimal
// context without it, such as a test's that only hands out targets.
template <class Ctx>
executor<space_of<Ctx>> exec_of(Ctx& ctx) {
  if constexpr (requires { ctx.exec(); }) {
    return ctx.exec();
  } else {
    static_assert(std::is_same_v<space_of<Ctx>, host>,
                  "strata: a context outside the host space must hand out its executor (ctx.exec())");
    return executor<host>{};
  }
}

namespace detail {
template <class From, class To>
struct convert_fn {
  const From* src;
  To* dst;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const { dst[i] = round_to<To>(static_cast<float>(src[i])); }
};
}  // namespace detail

// dst[i] = src[i] as To, for i in [0, n): a 16-bit value widens exactly, a float rounds
// to nearest even (round_to).
template <class Space, class From, class To>
void convert(const executor<Space>& exec, std::int64_t n, const From* src, To* dst) {
  ops_for<Space>::map(exec, n, detail::convert_fn<From, To>{src, dst});
}

// The deferred id checks a context carries (ctx.id_checks()), or none: each check waits.
template <class Ctx>
deferred_id_checks<space_of<Ctx>>* id_checks_of(Ctx& ctx) {
  if constexpr (requires { ctx.id_checks(); })
    return ctx.id_checks();
  else
    return nullptr;
}

}  // namespace strata
