// The lookups of nn::embedding and nn::vocab_parallel_embedding, in any space: a table that
// holds rows [lo, lo + local) of the vocabulary (all of it, or a tensor rank's slice).
#pragma once
#include <cstdint>
#include <string_view>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../model/param.hpp"
#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"
#include "../context.hpp"
#include "checks.hpp"

namespace strata::nn::detail {

// y[t, :] = the table's row for ids[t], zeros for an id another rank holds. The ids have
// been checked to be whole numbers in range. Rows of the weight type W are written as the
// activation type T (exact when they are the same type, as in a mixed GPU trainer).
template <class W = float, class T = float>
struct gather_rows_fn {
  const float* ids;
  const W* w;
  T* y;
  std::int64_t d, lo, local;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t t) const {
    const std::int64_t r = static_cast<std::int64_t>(ids[t]) - lo;
    T* yt = y + t * d;
    if (r >= 0 && r < local) {
      const W* wr = w + r * d;
      row.for_each(d, [&](std::int64_t j) { yt[j] = round_to<T>(static_cast<float>(wr[j])); });
    } else {
      row.for_each(d, [&](std::int64_t j) { yt[j] = round_to<T>(0.0f); });
    }
  }
};

// The rows [lo, lo + local) of a vocabulary of `vocab` ids that an embedding table holds.
struct table_rows {
  std::int64_t vocab, lo, local;
};

// An embedding's forward once its params are checked: ids [B] or [B, S] (rank 1 to 3),
// whole numbers in [0, vocab), as floats whatever the activations -> y [..., dim] of
// the context's activations (zeros for rows the table does not hold).
template <class Ctx>
void lookup(Ctx& ctx, std::string_view kind, const param<float>& weight, table_rows rows,
            const float_tensor_for<Ctx>& ids, tensor_for<Ctx>& y, tensor<unsigned long long, space_of<Ctx>>& scratch) {
  require_distinct(&ids, &y, kind, weight.name);
  const auto& s = ids.shape();
  expects<config_error>(s.rank != 0 && s.rank < shape::max_rank, [&] {
    return strata::cat(label(kind, weight.name), ": ids have shape ", s, "; expected rank 1 to 3 ([B] or [B, S])");
  });
  const std::int64_t n = static_cast<std::int64_t>(ids.numel()), d = weight.shape[1];
  check_ids(exec_of(ctx), id_checks_of(ctx), n, rows.vocab, ids.data(), scratch, false,
            [who = label(kind, weight.name), vocab = rows.vocab](float id, std::int64_t t) {
              return strata::cat(who, ": token id ", id, " at position ", t, " is out of range for vocab ", vocab,
                                 " (ids must be whole numbers in [0, ", vocab, "))");
            });
  shape out = s;
  out[out.rank++] = d;
  y.resize(out);
  ops_of<Ctx>::rows(exec_of(ctx), n, d,
                    gather_rows_fn<weight_of<Ctx>, activation_of<Ctx>>{ids.data(), weights_of<Ctx>(weight), y.data(), d,
                                                                       rows.lo, rows.local});
}

// Its backward: grad[id - lo] += dy row for each token whose id the table holds, in token
// order (float gradients, dy widened from the context's activations); dx is the gradient
// for the ids, which are not differentiable: float zeros of the ids' shape.
template <class Ctx>
void lookup_grad(Ctx& ctx, std::string_view kind, param<float>& weight, table_rows rows,
                 const float_tensor_for<Ctx>& ids, const tensor_for<Ctx>& dy, float_tensor_for<Ctx>& dx) {
  require_grad(weight, kind, weight.name, "weight");
  const std::int64_t d = weight.shape[1];
  shape out = ids.shape();
  out[out.rank++] = d;
  require_dy(dy, out, kind, weight.name);
  require_distinct(&dy, &dx, kind, weight.name);
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  const auto n = static_cast<std::int64_t>(ids.numel());
  dx.resize(ids.shape());
  ops::fill_zero(exec, dx.data(), n);
  ops::scatter_add_rows(exec, n, d, rows.lo, rows.local, ids.data(), dy.data(), weight.grad());
}

}  // namespace strata::nn::detail
