// nn::linear against a double-precision reference, finite differences, += semantics,
// no allocation on reuse, bias-free layers, and the messages for bad shapes; the backward
// of column-parallel linears that share an input against each one's own.
#include <algorithm>
#include <strata/nn/linear.hpp>
#include <strata/nn/tp/column_parallel_linear.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

// y[r, o] = sum_i x[r, i] W[o, i] + b[o] in double; also returns the scale sum |x||W| + |b|
// that bounds the float result's rounding error.
std::vector<double> reference(const nn::linear& l, const tensor<float>& x, std::vector<double>& scale) {
  const auto in = l.in_features(), out = l.out_features(), rows = static_cast<std::int64_t>(x.numel()) / in;
  std::vector<double> y(rows * out);
  scale.assign(rows * out, 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = l.has_bias() ? l.bias.data()[o] : 0.0, a = std::abs(s);
      for (std::int64_t i = 0; i < in; ++i) {
        s += static_cast<double>(x[r * in + i]) * l.weight.data()[o * in + i];
        a += std::abs(static_cast<double>(x[r * in + i]) * l.weight.data()[o * in + i]);
      }
      y[r * out + o] = s;
      scale[r * out + o] = a;
    }
  return y;
}

void check_forward(const nn::linear& l, const tensor<float>& x) {
  context ctx;
  nn::linear::cache c;
  tensor<float> y;
  l.forward(ctx, x, y, c);
  REQUIRE(y.shape().rank == x.shape().rank);
  REQUIRE(y.dim(y.shape().rank - 1) == l.out_features());
  std::vector<double> scale;
  const auto ref = reference(l, x, scale);
  REQUIRE(ref.size() == y.numel());
  // A float dot product of length K is off by at most about K * 2^-24 * sum|terms|;
  // 1e-5 covers K up to ~160 and any summation order BLAS picks.
  for (std::size_t i = 0; i < ref.size(); ++i) REQUIRE(std::abs(y[i] - ref[i]) <= 1e-5 * (scale[i] + 1e-30));
}

}  // namespace

TEST_CASE("make_linear: shapes, init like torch, decay only on the matrix") {
  auto l = nn::make_linear(16, 4);
  CHECK(l.weight.shape == shape{4, 16});
  CHECK(l.bias.shape == shape{4});
  CHECK(l.weight.init.k == strata::init_spec::kind::uniform);
  CHECK_REL(l.weight.init.scale, 0.25f, 1e-6);
  CHECK(l.bias.init.k == strata::init_spec::kind::zeros);
  CHECK(l.weight.decay);
  CHECK_FALSE(l.bias.decay);
  CHECK(l.has_bias());

  auto nb = nn::make_linear(16, 4, false);
  CHECK_FALSE(nb.has_bias());
  CHECK(nb.bias.shape == shape{0});
  CHECK(nb.bias.numel() == 0);  // takes no room in a flat layout

  CHECK_THROWS_AS(nn::make_linear(0, 4), strata::config_error);
  CHECK_THROWS_AS(nn::make_linear(4, -1), strata::config_error);
}

TEST_CASE("linear forward matches a double reference") {
  std::mt19937 rng(1);
  param_store store;
  for (bool bias : {true, false}) {
    auto l = nn::make_linear(8, 5, bias);
    store.bind(l.weight, rng);
    store.bind(l.bias, rng);
    if (!bias) REQUIRE(l.bias.data_ptr == nullptr);  // an empty param may stay unbound
    check_forward(l, random_tensor(shape{3, 8}, rng));
    check_forward(l, random_tensor(shape{2, 3, 8}, rng));  // [B, S, in]
    check_forward(l, random_tensor(shape{8}, rng));        // a single vector
  }
  SECTION("large enough for threaded bias broadcast and blocked column sums") {
    auto l = nn::make_linear(96, 160);
    store.bind(l.weight, rng);
    store.bind(l.bias, rng);
    check_forward(l, random_tensor(shape{300, 96}, rng));
  }
}

TEST_CASE("linear forward overwrites y, whatever it held") {
  std::mt19937 rng(2);
  param_store store;
  for (bool bias : {true, false}) {
    auto l = nn::make_linear(4, 3, bias);
    store.bind(l.weight, rng);
    store.bind(l.bias, rng);
    auto x = random_tensor(shape{2, 4}, rng);
    context ctx;
    nn::linear::cache c;
    tensor<float> y(shape{2, 3});
    for (auto& v : y.span()) v = std::numeric_limits<float>::quiet_NaN();
    l.forward(ctx, x, y, c);
    for (float v : y.span()) CHECK(std::isfinite(v));
  }
}

TEST_CASE("linear backward matches finite differences") {
  std::mt19937 rng(3);
  param_store store;
  for (bool bias : {true, false}) {
    auto l = nn::make_linear(6, 4, bias);
    l.weight.name = "fc.weight";
    l.bias.name = "fc.bias";
    store.bind(l.weight, rng);
    store.bind(l.bias, rng);
    auto x = random_tensor(shape{2, 3, 6}, rng);
    context ctx;
    const auto rep = check_gradients(l, ctx, x, {&l.weight, &l.bias}, rng);
    CHECK(rep.checked == l.weight.numel() + l.bias.numel() + x.numel());
  }
  SECTION("blocked, threaded sizes (sampled elements)") {
    auto l = nn::make_linear(64, 130);
    store.bind(l.weight, rng);
    store.bind(l.bias, rng);
    auto x = random_tensor(shape{260, 64}, rng);
    context ctx;
    // 33800 outputs: sqrt(n) is 23 times that of the 64-output budget, so 2.5e-4 * 23 ~ 6e-3.
    check_gradients(l, ctx, x, {&l.weight, &l.bias}, rng, {.abs_tol = 6e-3, .stride = 97});
  }
}

TEST_CASE("linear backward accumulates into param grads") {
  std::mt19937 rng(4);
  param_store store;
  auto l = nn::make_linear(5, 7);
  store.bind(l.weight, rng);
  store.bind(l.bias, rng);
  context ctx;
  check_accumulates(l, ctx, random_tensor(shape{4, 5}, rng), {&l.weight, &l.bias}, rng);
}

TEST_CASE("linear reuses its outputs: no allocation on a second step") {
  std::mt19937 rng(5);
  param_store store;
  auto l = nn::make_linear(32, 48);
  store.bind(l.weight, rng);
  store.bind(l.bias, rng);
  context ctx;
  check_no_allocation(l, ctx, random_tensor(shape{700, 32}, rng), rng);
}

TEST_CASE("linear: shapes that do not chain are config errors naming the layer") {
  std::mt19937 rng(6);
  param_store store;
  auto l = nn::make_linear(8, 3);
  store.bind(l.weight, rng);
  store.bind(l.bias, rng);
  context ctx;
  nn::linear::cache c;
  tensor<float> y, dx;
  const auto x = random_tensor(shape{2, 7}, rng);
  auto msg = message_of<strata::config_error>([&] { l.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "linear: input has 7 features, weight expects 8");

  l.weight.name = "blocks.3.fc1.weight";
  msg = message_of<strata::config_error>([&] { l.forward(ctx, x, y, c); });
  CHECK_CONTAINS(msg, "linear blocks.3.fc1: input has 7 features, weight expects 8");

  const auto good = random_tensor(shape{2, 8}, rng);
  l.forward(ctx, good, y, c);
  const auto bad_dy = random_tensor(shape{2, 4}, rng);
  msg = message_of<strata::config_error>([&] { l.backward(ctx, bad_dy, dx, c); });
  CHECK_CONTAINS(msg, "dy has shape [2, 4], the forward output had [2, 3]");

  nn::linear::cache fresh;
  CHECK_THROWS_AS(l.backward(ctx, y, dx, fresh), strata::config_error);  // backward before forward
  CHECK_THROWS_AS(l.forward(ctx, good, const_cast<tensor<float>&>(good), c), strata::config_error);

  auto unbound = nn::make_linear(8, 3);
  msg = message_of<strata::config_error>([&] { unbound.forward(ctx, good, y, c); });
  CHECK_CONTAINS(msg, "weight is not bound");
}

TEST_CASE("shared_input_backward: the sum of the linears' input gradients, each one's own param gradients") {
  std::mt19937 rng(7);
  param_store store;
  auto a = nn::make_column_parallel_linear(6, 4, 0, 1), b = nn::make_column_parallel_linear(6, 5, 0, 1, false);
  a.weight.name = "q.weight";
  b.weight.name = "k.weight";
  const std::vector<strata::param<float>*> params{&a.weight, &a.bias, &b.weight, &b.bias};
  for (auto* p : params) store.bind(*p, rng);
  context ctx;
  const auto x = random_tensor(shape{3, 6}, rng), dya = random_tensor(shape{3, 4}, rng),
             dyb = random_tensor(shape{3, 5}, rng);
  nn::column_parallel_linear::cache<> ca, cb;
  tensor<float> ya, yb, dxa, dxb, dx;
  a.forward(ctx, x, ya, ca);
  b.forward(ctx, x, yb, cb);
  a.backward(ctx, dya, dxa, ca);
  b.backward(ctx, dyb, dxb, cb);
  std::vector<std::vector<float>> alone;
  for (auto* p : params) alone.emplace_back(p->grads().begin(), p->grads().end());
  zero_grads(params);

  nn::shared_input_backward(ctx, {{a, dya, ca}, {b, dyb, cb}}, dx);
  REQUIRE(dx.shape() == x.shape());
  // One GEMM adds onto the other's rounded result where the separate form rounds both and
  // adds: a few float roundings of values of order 1, far below a missing term (order 1).
  float largest = 0.0f;
  for (std::size_t i = 0; i < dx.numel(); ++i) largest = std::max(largest, std::abs(dxa[i] + dxb[i]));
  for (std::size_t i = 0; i < dx.numel(); ++i) CHECK(std::abs(dx[i] - (dxa[i] + dxb[i])) <= 1e-6f * largest);
  // The param gradients are the same GEMMs and column sums: the same bits.
  for (std::size_t k = 0; k < params.size(); ++k)
    CHECK(std::equal(alone[k].begin(), alone[k].end(), params[k]->grads().begin()));

  // Linears that read different inputs are not one input's projections.
  nn::column_parallel_linear::cache<> other;
  const auto x2 = random_tensor(shape{3, 6}, rng);
  b.forward(ctx, x2, yb, other);
  const auto msg =
      message_of<strata::config_error>([&] { nn::shared_input_backward(ctx, {{a, dya, ca}, {b, dyb, other}}, dx); });
  CHECK_CONTAINS(msg, "'k.weight' and 'q.weight' must have read the same input");
}
