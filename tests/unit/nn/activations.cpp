// nn::relu and nn::gelu (erf and tanh forms) against double references and known values,
// finite differences away from relu's kink, and no allocation on reuse.
#include <numbers>
#include <strata/nn/gelu.hpp>
#include <strata/nn/relu.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

double gelu_ref(double x, nn::gelu_approximation a) {
  if (a == nn::gelu_approximation::tanh)
    return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
}

// Inputs spread over [-6, 6] but at least 4h from 0, where relu's derivative jumps.
tensor<float> away_from_zero(const shape& s, std::mt19937& rng) {
  auto t = random_tensor(s, rng, 0.05f, 6.0f);
  std::bernoulli_distribution sign(0.5);
  for (auto& v : t.span())
    if (sign(rng)) v = -v;
  return t;
}

}  // namespace

TEST_CASE("relu forward, backward and reuse") {
  std::mt19937 rng(10);
  nn::relu r;
  context ctx;
  auto x = away_from_zero(shape{4, 9}, rng);
  nn::relu::cache c;
  tensor<float> y;
  r.forward(ctx, x, y, c);
  REQUIRE(y.shape() == x.shape());
  for (std::size_t i = 0; i < x.numel(); ++i) CHECK(y[i] == std::max(x[i], 0.0f));

  check_gradients(r, ctx, x, {}, rng);
  check_no_allocation(r, ctx, away_from_zero(shape{300, 200}, rng), rng);  // the threaded path

  SECTION("the gradient at exactly 0 is 0, as in torch") {
    auto z = tensor_of(shape{3}, {0.0f, -0.0f, 1.0f});
    tensor<float> yz, dz;
    r.forward(ctx, z, yz, c);
    r.backward(ctx, tensor_of(shape{3}, {5.0f, 5.0f, 5.0f}), dz, c);
    CHECK(dz[0] == 0.0f);
    CHECK(dz[1] == 0.0f);
    CHECK(dz[2] == 5.0f);
  }
  SECTION("dy of the wrong shape") {
    tensor<float> dx;
    const auto msg = message_of<strata::config_error>([&] { r.backward(ctx, tensor<float>(shape{4, 8}), dx, c); });
    CHECK_CONTAINS(msg, "relu backward: dy has shape [4, 8], the forward output had [4, 9]");
  }
}

TEST_CASE("gelu matches torch's values and a double reference") {
  context ctx;
  // torch.nn.GELU()(torch.tensor([1., -1., 3.])) and GELU(approximate="tanh"): the
  // closed forms 0.5 x (1 + erf(x / sqrt 2)) and the tanh formula, to 7 digits.
  const auto x = tensor_of(shape{3}, {1.0f, -1.0f, 3.0f});
  tensor<float> y;
  nn::gelu::cache c;
  nn::gelu{}.forward(ctx, x, y, c);
  CHECK_REL(y[0], 0.8413447, 1e-6);
  CHECK_REL(y[1], -0.1586553, 1e-6);
  CHECK_REL(y[2], 2.9959502, 1e-6);
  nn::gelu{nn::gelu_approximation::tanh}.forward(ctx, x, y, c);
  CHECK_REL(y[0], 0.8411920, 1e-6);
  CHECK_REL(y[1], -0.1588080, 1e-6);

  std::mt19937 rng(11);
  for (auto a : {nn::gelu_approximation::none, nn::gelu_approximation::tanh}) {
    const nn::gelu g{a};
    // Large enough for the threaded path; values out to +-10 reach both tails.
    const auto big = random_tensor(shape{256, 160}, rng, -10.0f, 10.0f);
    g.forward(ctx, big, y, c);
    for (std::size_t i = 0; i < big.numel(); ++i) {
      // float erf/exp/tanh are within a few ulp: 2e-6 relative, plus 1e-7 absolute near
      // gelu's zero at x = 0, plus in the negative tail 1 + erf's cancellation: erf near -1
      // is good to 1-2 ulp there (2^-24 each), scaled by 0.5 |x|.
      const double ref = gelu_ref(big[i], a);
      const double tail = 0.5 * std::abs(static_cast<double>(big[i])) * 2.0 * 0x1p-24;
      REQUIRE(std::abs(y[i] - ref) <= 2e-6 * std::abs(ref) + 1e-7 + tail);
    }
  }
}

TEST_CASE("gelu backward matches finite differences, and reuses its outputs") {
  std::mt19937 rng(12);
  context ctx;
  for (auto a : {nn::gelu_approximation::none, nn::gelu_approximation::tanh}) {
    nn::gelu g{a};
    auto x = random_tensor(shape{5, 13}, rng, -4.0f, 4.0f);
    check_gradients(g, ctx, x, {}, rng);
    check_no_allocation(g, ctx, random_tensor(shape{300, 200}, rng), rng);
  }
}
