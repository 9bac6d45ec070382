// nn::rms_norm against a double reference (rows of very different scales), finite
// differences for weight and input, += semantics, reuse, and bad shapes.
#include <strata/nn/rms_norm.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

std::vector<double> reference(const nn::rms_norm& n, const tensor<float>& x) {
  const auto d = n.dim(), rows = static_cast<std::int64_t>(x.numel()) / d;
  std::vector<double> y(x.numel());
  for (std::int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (std::int64_t j = 0; j < d; ++j) ms += static_cast<double>(x[r * d + j]) * x[r * d + j];
    ms /= d;
    for (std::int64_t j = 0; j < d; ++j) y[r * d + j] = x[r * d + j] / std::sqrt(ms + n.eps) * n.weight.data()[j];
  }
  return y;
}

}  // namespace

TEST_CASE("make_rms_norm: ones, no decay, eps") {
  auto n = nn::make_rms_norm(12);
  CHECK(n.weight.shape == shape{12});
  CHECK(n.weight.init.k == strata::init_spec::kind::ones);
  CHECK_FALSE(n.weight.decay);
  CHECK(n.eps == 1e-6f);
  CHECK_THROWS_AS(nn::make_rms_norm(0), strata::config_error);
  CHECK_THROWS_AS(nn::make_rms_norm(4, 0.0f), strata::config_error);
}

TEST_CASE("rms_norm forward matches a double reference") {
  std::mt19937 rng(30);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(40);
  store.bind(n.weight, rng, 0.5f, 1.5f);
  nn::rms_norm::cache c;
  tensor<float> y;
  for (float scale : {1e-3f, 1.0f, 1e3f}) {  // the result does not depend on the row's scale
    auto x = random_tensor(shape{3, 5, 40}, rng, -scale, scale);
    n.forward(ctx, x, y, c);
    const auto ref = reference(n, x);
    // Each output is a float product of x, rstd and weight: three roundings of 2^-24
    // on an O(1) value, plus rstd's float rounding.
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 5e-7 * (1.0 + std::abs(ref[i])));
  }
  SECTION("threaded rows") {
    auto big = nn::make_rms_norm(256);
    store.bind(big.weight, rng);
    auto x = random_tensor(shape{200, 256}, rng, -3.0f, 3.0f);
    big.forward(ctx, x, y, c);
    const auto ref = reference(big, x);
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 5e-7 * (1.0 + std::abs(ref[i])));
  }
}

TEST_CASE("rms_norm backward matches finite differences and accumulates") {
  std::mt19937 rng(31);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(16);
  store.bind(n.weight, rng, 0.5f, 1.5f);
  auto x = random_tensor(shape{2, 3, 16}, rng, -2.0f, 2.0f);
  check_gradients(n, ctx, x, {&n.weight}, rng);
  check_accumulates(n, ctx, x, {&n.weight}, rng);

  auto big = nn::make_rms_norm(256);
  store.bind(big.weight, rng);
  auto xb = random_tensor(shape{200, 256}, rng, -2.0f, 2.0f);
  // 51200 outputs: sqrt(n) is 28 times the 64-output budget.
  check_gradients(big, ctx, xb, {&big.weight}, rng, {.abs_tol = 7e-3, .stride = 211});
  check_no_allocation(big, ctx, xb, rng);
}

TEST_CASE("rms_norm: a mismatched input is a config error naming the layer") {
  std::mt19937 rng(32);
  param_store store;
  context ctx;
  auto n = nn::make_rms_norm(8);
  n.weight.name = "layers.0.input_layernorm.weight";
  store.bind(n.weight, rng);
  nn::rms_norm::cache c;
  tensor<float> y;
  const auto x = random_tensor(shape{2, 6}, rng);
  const auto msg = message_of<strata::config_error>([&] { n.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "rms_norm layers.0.input_layernorm: input has 6 features, weight expects 8");
}
