// nn::swiglu_mlp (one tensor-parallel rank) against down(silu(gate x) * up x) in double,
// finite differences, += semantics and no allocation on reuse.
#include <strata/nn/swiglu.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {
std::vector<double> reference(const nn::swiglu_mlp& m, const tensor<float>& x) {
  const std::int64_t D = m.gate_proj.in_features(), I = m.gate_proj.out_features(),
                     rows = static_cast<std::int64_t>(x.numel()) / D;
  std::vector<double> y(rows * D, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<double> h(I);
    for (std::int64_t o = 0; o < I; ++o) {
      double g = 0.0, u = 0.0;
      for (std::int64_t i = 0; i < D; ++i) {
        g += static_cast<double>(x[r * D + i]) * m.gate_proj.weight.data()[o * D + i];
        u += static_cast<double>(x[r * D + i]) * m.up_proj.weight.data()[o * D + i];
      }
      h[o] = g / (1.0 + std::exp(-g)) * u;
    }
    for (std::int64_t o = 0; o < D; ++o)
      for (std::int64_t i = 0; i < I; ++i) y[r * D + o] += h[i] * m.down_proj.weight.data()[o * I + i];
  }
  return y;
}
}  // namespace

TEST_CASE("swiglu_mlp: shapes, no biases, forward against a double reference") {
  std::mt19937 rng(41);
  param_store store;
  auto m = nn::make_swiglu_mlp(12, 20);
  CHECK(m.gate_proj.weight.shape == shape{20, 12});
  CHECK(m.down_proj.weight.shape == shape{12, 20});
  CHECK_FALSE(m.gate_proj.has_bias());
  CHECK_FALSE(m.up_proj.has_bias());
  CHECK_FALSE(m.down_proj.has_bias());
  for (auto* p : {&m.gate_proj.weight, &m.up_proj.weight, &m.down_proj.weight}) store.bind(*p, rng, -0.5f, 0.5f);
  context ctx;
  nn::swiglu_mlp::cache c;
  tensor<float> y;
  const auto x = random_tensor(shape{3, 4, 12}, rng, -2.0f, 2.0f);
  m.forward(ctx, x, y, c);
  const auto ref = reference(m, x);
  // Three float dot products of length <= 20 and an exp per unit: ~1e-6 relative each.
  for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 1e-5 * (1.0 + std::abs(ref[i])));
}

TEST_CASE("swiglu_mlp backward matches finite differences, accumulates, reuses") {
  std::mt19937 rng(42);
  param_store store;
  auto m = nn::make_swiglu_mlp(8, 16);
  for (auto* p : {&m.gate_proj.weight, &m.up_proj.weight, &m.down_proj.weight}) store.bind(*p, rng, -0.5f, 0.5f);
  context ctx;
  auto x = random_tensor(shape{2, 3, 8}, rng, -2.0f, 2.0f);
  const std::vector<param<float>*> ps{&m.gate_proj.weight, &m.up_proj.weight, &m.down_proj.weight};
  check_gradients(m, ctx, x, ps, rng);
  check_accumulates(m, ctx, x, ps, rng);
  check_no_allocation(m, ctx, x, rng);
}
