// Host loops shared by the nn/ layers: an elementwise map that goes parallel only when
// it pays, deterministic column reductions for bias-like gradients, and shape helpers.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../../core/shape.hpp"
#include "../../space/tensor.hpp"

namespace strata::nn::detail {

// Below this many elements an OpenMP team costs more than it saves (a fork/join is a
// few microseconds; a cheap elementwise op is under a nanosecond per element).
inline constexpr std::int64_t parallel_threshold = 1 << 15;

// f(i) for i in [0, n): vectorized always, threaded when n is large.
template <class F>
STRATA_FORCEINLINE void elementwise(std::int64_t n, F&& f) {
#pragma omp parallel for simd if (parallel : n >= parallel_threshold)
  for (std::int64_t i = 0; i < n; ++i) f(i);
}

// f(row) for each row, threaded when rows * row_cost is large.
template <class F>
STRATA_FORCEINLINE void for_rows(std::int64_t rows, std::int64_t row_cost, F&& f) {
#pragma omp parallel for schedule(static) if (rows * row_cost >= parallel_threshold && rows > 1)
  for (std::int64_t r = 0; r < rows; ++r) f(r);
}

// out[j] += sum over i of term(i, j), for i < rows, j < cols. Threads split the columns
// and each column is summed over rows in order, in double: the result does not depend
// on the thread count (DESIGN §4: no reduction whose order varies).
template <class Term>
void add_column_sums(std::int64_t rows, std::int64_t cols, float* out, Term&& term) {
  constexpr std::int64_t block = 64;
  const std::int64_t blocks = (cols + block - 1) / block;
#pragma omp parallel for schedule(static) if (rows * cols >= parallel_threshold && blocks > 1)
  for (std::int64_t bj = 0; bj < blocks; ++bj) {
    const std::int64_t j0 = bj * block, j1 = std::min(cols, j0 + block);
    double acc[block] = {};
    for (std::int64_t i = 0; i < rows; ++i) {
#pragma omp simd
      for (std::int64_t j = j0; j < j1; ++j) acc[j - j0] += static_cast<double>(term(i, j));
    }
    for (std::int64_t j = j0; j < j1; ++j) out[j] = static_cast<float>(out[j] + acc[j - j0]);
  }
}

// "linear" or "linear fc1" when the layout has named the param "fc1.weight": layers do
// not know their field name, their params do once a model is reflected. Only built on
// the error path, so a forward that passes its checks allocates nothing.
inline std::string label(std::string_view kind, const std::string& param_name) {
  const auto dot = param_name.rfind('.');
  if (dot == std::string::npos) return std::string(kind);
  return strata::detail::cat(kind, " ", std::string_view(param_name).substr(0, dot));
}

template <class E = config_error>
[[noreturn]] inline void fail(const std::string& message, const std::source_location& loc) {
  throw E(message + " [" + strata::detail::where(loc) + "]");
}

// [n]. Built field by field: shape's initializer-list constructor formats its error
// message eagerly, which would allocate on every call inside a step.
inline strata::shape vector_shape(std::int64_t n) {
  strata::shape s;
  s.rank = 1;
  s[0] = n;
  return s;
}

// The shape s with its last extent replaced by last.
inline strata::shape with_last(strata::shape s, std::int64_t last) {
  s[s.rank - 1] = last;
  return s;
}

// Number of rows when the last dimension is the feature dimension.
inline std::int64_t rows_of(const strata::shape& s) {
  std::int64_t r = 1;
  for (std::size_t i = 0; i + 1 < s.rank; ++i) r *= s[i];
  return r;
}

// The checks every layer makes before touching memory. `kind` names the layer type and
// `owner` is one of its params, whose reflected name tells which field it is.
template <class P>
void require_bound(const P& p, std::string_view kind, const std::string& owner, std::string_view what,
                   const std::source_location loc = std::source_location::current()) {
  if (p.numel() != 0 && !p.bound()) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": ", what,
                             " is not bound to storage (bind params through the model layout first)"),
         loc);
}
template <class P>
void require_grad(const P& p, std::string_view kind, const std::string& owner, std::string_view what,
                  const std::source_location loc = std::source_location::current()) {
  if (p.numel() != 0 && p.grad_ptr == nullptr) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": ", what, " has no gradient storage bound"), loc);
}

template <class Space>
void require_features(const tensor<float, Space>& x, std::int64_t features, std::string_view kind,
                             const std::string& owner, std::string_view param_kind,
                             const std::source_location loc = std::source_location::current()) {
  if (x.shape().rank == 0) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": input is a scalar (rank 0), expected [..., ", features, "]"),
         loc);
  const auto got = x.shape()[x.shape().rank - 1];
  if (got != features) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": input has ", got, " features, ", param_kind, " expects ",
                             features, " (input shape ", x.shape(), ")"),
         loc);
}

inline void require_distinct(const void* in, const void* out, std::string_view kind, const std::string& owner,
                             const std::source_location loc = std::source_location::current()) {
  if (in == out) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": input and output are the same tensor (in-place is not supported)"),
         loc);
}

template <class Space>
void require_dy(const tensor<float, Space>& dy, const strata::shape& expected, std::string_view kind,
                       const std::string& owner, const std::source_location loc = std::source_location::current()) {
  if (!(dy.shape() == expected)) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), " backward: dy has shape ", dy.shape(),
                             ", the forward output had ", expected),
         loc);
}

inline void require_forward_ran(const void* input, std::string_view kind, const std::string& owner,
                                const std::source_location loc = std::source_location::current()) {
  if (input == nullptr) [[unlikely]]
    fail(strata::detail::cat(label(kind, owner), ": backward called with a cache that no forward filled"), loc);
}

}  // namespace strata::nn::detail
