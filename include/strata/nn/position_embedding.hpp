// nn::position_embedding: adds a learned vector per sequence position to [B, S, D]
// activations (GPT-2's wpe), for S up to the table's length. Replicated under tensor parallelism.
#pragma once
#include <cstdint>
#include <type_traits>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

struct position_embedding {
  param<float> weight;  // [max_seq, dim]

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  std::int64_t max_seq() const noexcept { return weight.shape[0]; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // x [B, S, D] (or [S, D]) -> y = x + weight[s] at each position s.
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    const std::int64_t S = check_input(x);
    nn::detail::require_distinct(&x, &y, "position_embedding", weight.name);
    y.resize(x.shape());
    const std::int64_t d = dim(), per_row = S * d, rows = static_cast<std::int64_t>(x.numel()) / per_row;
    const float *xp = x.data(), *w = weight.data();
    float* yp = y.data();
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      nn::detail::for_rows(rows, per_row, [&](std::int64_t b) {
        const float* xr = xp + b * per_row;
        float* yr = yp + b * per_row;
#pragma omp simd
        for (std::int64_t j = 0; j < per_row; ++j) yr[j] = xr[j] + w[j];
      });
    } else {
      nn::detail::device_ops_for<space_of<Ctx>>::add_rows(ctx.exec(), rows, per_row, xp, w, yp);
    }
    c.x = &x;
  }

  // dx = dy; weight.grad[s] += sum over the batch of dy[b, s].
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.x, "position_embedding", weight.name);
    nn::detail::require_grad(weight, "position_embedding", weight.name, "weight");
    nn::detail::require_dy(dy, c.x->shape(), "position_embedding", weight.name);
    nn::detail::require_distinct(&dy, &dx, "position_embedding", weight.name);
    const std::int64_t S = check_input(*c.x);
    const std::int64_t per_row = S * dim(), rows = static_cast<std::int64_t>(dy.numel()) / per_row;
    dx.resize(dy.shape());
    const float* g = dy.data();
    float* dxp = dx.data();
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      nn::detail::elementwise(static_cast<std::int64_t>(dy.numel()), [=](std::int64_t i) { dxp[i] = g[i]; });
      nn::detail::add_column_sums(rows, per_row, weight.grad(),
                                  [g, per_row](std::int64_t i, std::int64_t j) { return g[i * per_row + j]; });
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      ops::copy(ctx.exec(), dxp, g, static_cast<std::int64_t>(dy.numel()));
      ops::add_column_sums(ctx.exec(), rows, per_row, g, weight.grad());
    }
  }

 private:
  // Returns S.
  template <class Space>
  std::int64_t check_input(const tensor<float, Space>& x) const {
    if (weight.shape.rank != 2) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label("position_embedding", weight.name), ": weight has shape ",
                                           weight.shape, "; expected [max_seq, dim]"),
                       std::source_location::current());
    nn::detail::require_bound(weight, "position_embedding", weight.name, "weight");
    const auto& s = x.shape();
    if (s.rank < 2 || s.rank > 3 || s[s.rank - 1] != dim() || s[s.rank - 2] > max_seq() || s[s.rank - 2] < 1)
        [[unlikely]]
      nn::detail::fail(
          strata::detail::cat(nn::detail::label("position_embedding", weight.name), ": input has shape ", s,
                              "; expected [B, S, ", dim(), "] or [S, ", dim(), "] with 1 <= S <= ", max_seq()),
          std::source_location::current());
    return s[s.rank - 2];
  }
};

// GPT-2 initialises its position table with N(0, 0.01).
inline position_embedding make_position_embedding(int max_seq, int dim, float init_stddev = 0.01f) {
  strata::expects<config_error>(max_seq > 0 && dim > 0, strata::detail::cat("make_position_embedding(", max_seq, ", ",
                                                                            dim, "): sizes must be positive"));
  return position_embedding{param<float>(shape{max_seq, dim}, init_spec::normal(init_stddev))};
}

}  // namespace strata::nn
