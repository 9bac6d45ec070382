// nn::position_embedding: adds a learned vector per sequence position to [B, S, D]
// activations (GPT-2's wpe), for S up to the table's length. Replicated under tensor parallelism.
#pragma once
#include <cstdint>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "detail/linear_ops.hpp"

namespace strata::nn {

struct position_embedding {
  param<float> weight;  // [max_seq, dim]

  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  std::int64_t max_seq() const noexcept { return weight.shape[0]; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // x [B, S, D] (or [S, D]) -> y = x + weight[s] at each position s (the sum in float,
  // rounded once to the activation type).
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const std::int64_t S = check_input(x);
    detail::require_distinct(&x, &y, kind, weight.name);
    y.resize(x.shape());
    const std::int64_t per_row = S * dim(), rows = static_cast<std::int64_t>(x.numel()) / per_row;
    detail::add_rows(ctx, rows, per_row, x.data(), weights_of<Ctx>(weight), y.data());
    c.x = &x;
  }

  // dx = dy; weight.grad[s] += sum over the batch of dy[b, s] (the gradient float, whatever dy's type).
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, kind, weight.name);
    detail::require_grad(weight, kind, weight.name, "weight");
    detail::require_dy(dy, c.x->shape(), kind, weight.name);
    detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t S = check_input(*c.x);
    const std::int64_t per_row = S * dim(), rows = static_cast<std::int64_t>(dy.numel()) / per_row;
    dx.resize(dy.shape());
    using ops = ops_of<Ctx>;
    const auto exec = exec_of(ctx);
    ops::copy(exec, dx.data(), dy.data(), static_cast<std::int64_t>(dy.numel()));
    ops::add_column_sums(exec, rows, per_row, detail::matrix_term<activation_of<Ctx>>{dy.data(), per_row},
                         weight.grad());
  }

 private:
  static constexpr const char* kind = "position_embedding";

  // Returns S.
  template <class T, class Space>
  std::int64_t check_input(const tensor<T, Space>& x) const {
    expects<config_error>(weight.shape.rank == 2, [&] {
      return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape,
                         "; expected [max_seq, dim]");
    });
    detail::require_bound(weight, kind, weight.name, "weight");
    const auto& s = x.shape();
    expects<config_error>(
        s.rank >= 2 && s.rank <= 3 && s[s.rank - 1] == dim() && s[s.rank - 2] <= max_seq() && s[s.rank - 2] >= 1, [&] {
          return strata::cat(detail::label(kind, weight.name), ": input has shape ", s, "; expected [B, S, ", dim(),
                             "] or [S, ", dim(), "] with 1 <= S <= ", max_seq());
        });
    return s[s.rank - 2];
  }
};

// GPT-2 initialises its position table with N(0, 0.01).
inline position_embedding make_position_embedding(int max_seq, int dim, float init_stddev = 0.01f) {
  strata::expects<config_error>(
      max_seq > 0 && dim > 0, strata::cat("make_position_embedding(", max_seq, ", ", dim, "): sizes must be positive"));
  return position_embedding{param<float>(shape{max_seq, dim}, init_spec::normal(init_stddev))};
}

}  // namespace strata::nn
