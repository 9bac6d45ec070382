// The lookups of nn::embedding and nn::vocab_parallel_embedding, in any space: a table that
// holds rows [lo, lo + local) of the vocabulary (all of it, or a tensor rank's slice).
#pragma once
#include <cstdint>
#include <string>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"

namespace strata::nn::detail {

// The error of a bad id at position t, for a layer named `who` over `vocab` ids.
inline std::string bad_token_message(const std::string& who, float id, std::int64_t t, std::int64_t vocab) {
  return strata::detail::cat(who, ": token id ", id, " at position ", t, " is out of range for vocab ", vocab,
                             " (ids must be whole numbers in [0, ", vocab, "))");
}

// y[t, :] = the table's row for ids[t], zeros for an id another rank holds. The ids have
// been checked to be whole numbers in range.
struct gather_rows_fn {
  const float* ids;
  const float* w;
  float* y;
  std::int64_t d, lo, local;
  template <class Row>
  STRATA_HOST_DEVICE void operator()(const Row& row, std::int64_t t) const {
    const std::int64_t r = static_cast<std::int64_t>(ids[t]) - lo;
    float* yt = y + t * d;
    if (r >= 0 && r < local) {
      const float* wr = w + r * d;
      row.for_each(d, [&](std::int64_t j) { yt[j] = wr[j]; });
    } else {
      row.for_each(d, [&](std::int64_t j) { yt[j] = 0.0f; });
    }
  }
};

template <class Ctx>
void gather_rows(Ctx& ctx, std::int64_t n, std::int64_t d, std::int64_t lo, std::int64_t local, const float* ids,
                 const float* w, float* y) {
  ops_of<Ctx>::rows(exec_of(ctx), n, d, gather_rows_fn{ids, w, y, d, lo, local});
}

// grad[id - lo] += dy row for each token whose id the table holds, in token order; dx is
// the gradient for the ids, which are not differentiable: zeros of the ids' shape.
template <class Ctx>
void embedding_grad(Ctx& ctx, const tensor_for<Ctx>& ids, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                    std::int64_t d, std::int64_t lo, std::int64_t local, float* grad) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  const auto n = static_cast<std::int64_t>(ids.numel());
  dx.resize(ids.shape());
  ops::fill_zero(exec, dx.data(), n);
  ops::scatter_add_rows(exec, n, d, lo, local, ids.data(), dy.data(), grad);
}

}  // namespace strata::nn::detail
