// The checks every nn/ layer makes before touching memory, with messages that name the
// layer by its params' reflected names, and the shape arithmetic they share.
#pragma once
#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <string_view>
#include <utility>

#include "../../core/error.hpp"
#include "../../core/shape.hpp"
#include "../../space/host_ops.hpp"  // the host space is always there; CUDA comes with <strata/cuda.cuh>
#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"

namespace strata::nn::detail {

using strata::detail::vector_shape;

// "linear" or "linear fc1" when the layout has named the param "fc1.weight": layers do
// not know their field name, their params do once a model is reflected. Only built on
// the error path, so a forward that passes its checks allocates nothing.
inline std::string label(std::string_view kind, const std::string& param_name) {
  const auto dot = param_name.rfind('.');
  if (dot == std::string::npos) return std::string(kind);
  return strata::cat(kind, " ", std::string_view(param_name).substr(0, dot));
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

// `kind` names the layer type and `owner` is one of its params, whose reflected name
// tells which field it is.
template <class P>
void require_bound(const P& p, std::string_view kind, const std::string& owner, std::string_view what,
                   const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      p.numel() == 0 || p.bound(),
      [&] {
        return strata::cat(label(kind, owner), ": ", what,
                           " is not bound to storage (bind params through the model layout first)");
      },
      loc);
}
template <class P>
void require_grad(const P& p, std::string_view kind, const std::string& owner, std::string_view what,
                  const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      p.numel() == 0 || p.grad_ptr != nullptr,
      [&] { return strata::cat(label(kind, owner), ": ", what, " has no gradient storage bound"); }, loc);
}

template <class T, class Space>
void require_features(const tensor<T, Space>& x, std::int64_t features, std::string_view kind, const std::string& owner,
                      std::string_view param_kind, const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      x.shape().rank != 0,
      [&] { return strata::cat(label(kind, owner), ": input is a scalar (rank 0), expected [..., ", features, "]"); },
      loc);
  const auto got = x.shape()[x.shape().rank - 1];
  expects<config_error>(
      got == features,
      [&] {
        return strata::cat(label(kind, owner), ": input has ", got, " features, ", param_kind, " expects ", features,
                           " (input shape ", x.shape(), ")");
      },
      loc);
}

inline void require_distinct(const void* in, const void* out, std::string_view kind, const std::string& owner,
                             const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      in != out,
      [&] {
        return strata::cat(label(kind, owner), ": input and output are the same tensor (in-place is not supported)");
      },
      loc);
}

template <class T, class Space>
void require_dy(const tensor<T, Space>& dy, const strata::shape& expected, std::string_view kind,
                const std::string& owner, const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      dy.shape() == expected,
      [&] {
        return strata::cat(label(kind, owner), " backward: dy has shape ", dy.shape(), ", the forward output had ",
                           expected);
      },
      loc);
}

// A second operand (a residual, say) of x's shape.
template <class T, class Space>
void require_same_shape(const tensor<T, Space>& x, const tensor<T, Space>& other, std::string_view kind,
                        const std::string& owner, std::string_view what,
                        const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      x.shape() == other.shape(),
      [&] {
        return strata::cat(label(kind, owner), ": ", what, " has shape ", other.shape(), ", expected ", x.shape());
      },
      loc);
}

inline void require_forward_ran(const void* input, std::string_view kind, const std::string& owner,
                                const std::source_location loc = std::source_location::current()) {
  expects<config_error>(
      input != nullptr,
      [&] { return strata::cat(label(kind, owner), ": backward called with a cache that no forward filled"); }, loc);
}

// An id check's result as the layer's error (a strata::error: bad data, not a bad
// configuration), e.g. "embedding: token id 70 at position 3 is out of range ...".
template <class Message>
void require_ids(const id_check& bad, Message&& message,
                 const std::source_location loc = std::source_location::current()) {
  expects<error>(!bad, [&] { return message(bad.value, bad.index); }, loc);
}

// check_ids of values[0, n) as the layer's error: at once, or, given deferred checks (a
// GPU trainer's), queued with its message, which the trainer raises when it reads the
// step's checks back, before the optimizer uses anything. So the message must own what
// it reads (capture by value); the layer's kernels must not read out of bounds for a
// bad id in the meantime.
template <class Space, class Scratch, class Message>
void check_ids(const executor<Space>& exec, deferred_id_checks<Space>* deferred, std::int64_t n, std::int64_t limit,
               const float* values, Scratch& scratch, bool labels, Message&& message,
               const std::source_location loc = std::source_location::current()) {
  if constexpr (!Space::host_accessible) {
    if (deferred) {
      deferred->queue(exec, n, limit, values, labels, std::forward<Message>(message), loc);
      return;
    }
  }
  require_ids(ops_for<Space>::check_ids(exec, n, limit, values, scratch, labels), message, loc);
}

}  // namespace strata::nn::detail
