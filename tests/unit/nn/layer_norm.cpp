// nn::layer_norm against a double reference (including rows with a large mean), finite
// differences for weight, bias and input, += semantics, reuse, and bad shapes;
// forward_again gives forward's bits from the kept input and statistics.
#include <cstring>
#include <strata/nn/layer_norm.hpp>
#include <vector>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

std::vector<double> reference(const nn::layer_norm& ln, const tensor<float>& x) {
  const auto d = ln.dim(), rows = static_cast<std::int64_t>(x.numel()) / d;
  std::vector<double> y(x.numel());
  for (std::int64_t r = 0; r < rows; ++r) {
    double m = 0.0, v = 0.0;
    for (std::int64_t j = 0; j < d; ++j) m += x[r * d + j];
    m /= d;
    for (std::int64_t j = 0; j < d; ++j) v += (x[r * d + j] - m) * (x[r * d + j] - m);
    v /= d;
    for (std::int64_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - m) / std::sqrt(v + ln.eps) * ln.weight.data()[j] + ln.bias.data()[j];
  }
  return y;
}

}  // namespace

TEST_CASE("make_layer_norm: ones and zeros, no decay, eps") {
  auto ln = nn::make_layer_norm(12);
  CHECK(ln.weight.shape == shape{12});
  CHECK(ln.weight.init.k == strata::init_spec::kind::ones);
  CHECK(ln.bias.init.k == strata::init_spec::kind::zeros);
  CHECK_FALSE(ln.weight.decay);
  CHECK_FALSE(ln.bias.decay);
  CHECK(ln.eps == 1e-5f);
  CHECK_THROWS_AS(nn::make_layer_norm(0), strata::config_error);
  CHECK_THROWS_AS(nn::make_layer_norm(4, 0.0f), strata::config_error);
}

TEST_CASE("layer_norm forward matches a double reference") {
  std::mt19937 rng(20);
  param_store store;
  context ctx;
  auto ln = nn::make_layer_norm(40);
  store.bind(ln.weight, rng, 0.5f, 1.5f);
  store.bind(ln.bias, rng);
  nn::layer_norm::cache c;
  tensor<float> y;
  for (float offset : {0.0f, 1000.0f}) {
    // offset 1000 with unit spread: a one-pass E[x^2] - E[x]^2 in float would lose
    // every digit of the variance here.
    auto x = random_tensor(shape{3, 5, 40}, rng, offset - 1.0f, offset + 1.0f);
    ln.forward(ctx, x, y, c);
    const auto ref = reference(ln, x);
    // Normalised outputs are O(1); float rounding of x - mean is relative to |x|, so
    // the bound grows with the offset: 2^-24 * (|offset| + 1) / std ~ 1e-4 at 1000.
    const double tol = 2e-6 + 1.2e-7 * offset;
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= tol * (1.0 + std::abs(ref[i])));
  }
  SECTION("threaded rows") {
    auto big = nn::make_layer_norm(256);
    store.bind(big.weight, rng);
    store.bind(big.bias, rng);
    auto x = random_tensor(shape{200, 256}, rng, -3.0f, 3.0f);
    big.forward(ctx, x, y, c);
    const auto ref = reference(big, x);
    for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 2e-6 * (1.0 + std::abs(ref[i])));
  }
}

TEST_CASE("layer_norm forward_again: forward's bits from the kept input, mean and rstd") {
  std::mt19937 rng(21);
  param_store store;
  context ctx;
  auto ln = nn::make_layer_norm(48);
  store.bind(ln.weight, rng, 0.5f, 1.5f);
  store.bind(ln.bias, rng);
  const auto x = random_tensor(shape{3, 7, 48}, rng, 5.0f, 9.0f);  // a mean far from 0
  nn::layer_norm::cache c;
  tensor<float> y, again;
  ln.forward(ctx, x, y, c);
  ln.forward_again(ctx, again, c);
  REQUIRE(again.shape() == y.shape());
  CHECK(std::memcmp(again.data(), y.data(), y.numel() * sizeof(float)) == 0);
  CHECK_THROWS_AS(ln.forward_again(ctx, again, nn::layer_norm::cache{}), strata::config_error);  // no forward ran

  // bf16 activations: the same rounding of the same float expression.
  using strata::bf16;
  namespace d = strata::nn::detail;
  const std::int64_t rows = 21, dim = 48;
  std::vector<bf16> xb(x.numel()), yb(x.numel()), yb2(x.numel());
  for (std::size_t i = 0; i < x.numel(); ++i) xb[i] = bf16(x[i]);
  std::vector<float> mean(rows), rstd(rows);
  using ops = strata::ops<strata::host>;
  const strata::executor<strata::host> exec{};
  ops::rows(exec, rows, dim,
            d::layer_norm_forward_fn<float, bf16>{xb.data(), ln.weight.data(), ln.bias.data(), yb.data(), mean.data(),
                                                  rstd.data(), dim, 1e-5});
  ops::rows(exec, rows, dim,
            d::layer_norm_apply_fn<float, bf16>{xb.data(), ln.weight.data(), ln.bias.data(), mean.data(), rstd.data(),
                                                yb2.data(), dim});
  CHECK(std::memcmp(yb.data(), yb2.data(), yb.size() * sizeof(bf16)) == 0);
}

TEST_CASE("layer_norm backward matches finite differences and accumulates") {
  std::mt19937 rng(21);
  param_store store;
  context ctx;
  auto ln = nn::make_layer_norm(16);
  store.bind(ln.weight, rng, 0.5f, 1.5f);
  store.bind(ln.bias, rng);
  // Spread 2 per element so that the row std is near 1 and h is small against it.
  auto x = random_tensor(shape{2, 3, 16}, rng, -2.0f, 2.0f);
  check_gradients(ln, ctx, x, {&ln.weight, &ln.bias}, rng);
  check_accumulates(ln, ctx, x, {&ln.weight, &ln.bias}, rng);

  auto big = nn::make_layer_norm(256);
  store.bind(big.weight, rng);
  store.bind(big.bias, rng);
  auto xb = random_tensor(shape{200, 256}, rng, -2.0f, 2.0f);
  // 51200 outputs: sqrt(n) is 28 times the 64-output budget.
  check_gradients(big, ctx, xb, {&big.weight, &big.bias}, rng, {.abs_tol = 7e-3, .stride = 211});
  check_no_allocation(big, ctx, xb, rng);
}

TEST_CASE("layer_norm: a mismatched input is a config error naming the layer") {
  std::mt19937 rng(22);
  param_store store;
  context ctx;
  auto ln = nn::make_layer_norm(8);
  ln.weight.name = "blocks.0.ln1.weight";
  store.bind(ln.weight, rng);
  store.bind(ln.bias, rng);
  nn::layer_norm::cache c;
  tensor<float> y;
  const auto x = random_tensor(shape{2, 6}, rng);
  const auto msg = message_of<strata::config_error>([&] { ln.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "layer_norm blocks.0.ln1: input has 6 features, weight expects 8");
}
