// nn::embedding: exact gathers for [B] and [B, S] ids, scatter-add gradients with
// repeated ids (finite differences and a direct count), reuse, and bad ids.
#include <strata/nn/embedding.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

tensor<float> random_ids(const shape& s, int vocab, std::mt19937& rng) {
  tensor<float> t(s);
  std::uniform_int_distribution<int> u(0, vocab - 1);
  for (auto& v : t.span()) v = static_cast<float>(u(rng));
  return t;
}

}  // namespace

TEST_CASE("make_embedding: shape and torch's N(0, 1) init") {
  auto e = nn::make_embedding(50, 8);
  CHECK(e.weight.shape == shape{50, 8});
  CHECK(e.weight.init.k == strata::init_spec::kind::normal);
  CHECK(e.weight.init.scale == 1.0f);
  CHECK(nn::make_embedding(50, 8, 0.02f).weight.init.scale == 0.02f);
  CHECK_THROWS_AS(nn::make_embedding(0, 8), strata::config_error);
  CHECK_THROWS_AS(nn::make_embedding((1 << 24) + 1, 1), strata::config_error);
}

TEST_CASE("embedding forward copies weight rows exactly") {
  std::mt19937 rng(30);
  param_store store;
  context ctx;
  auto e = nn::make_embedding(11, 6);
  store.bind(e.weight, rng);
  nn::embedding::cache c;
  tensor<float> y;
  for (const auto& s : {shape{7}, shape{3, 5}, shape{2, 2, 3}}) {
    const auto ids = random_ids(s, 11, rng);
    e.forward(ctx, ids, y, c);
    REQUIRE(y.shape().rank == s.rank + 1);
    REQUIRE(y.numel() == ids.numel() * 6);
    for (std::size_t t = 0; t < ids.numel(); ++t)
      for (std::size_t j = 0; j < 6; ++j)
        REQUIRE(y[t * 6 + j] == e.weight.data()[static_cast<std::size_t>(ids[t]) * 6 + j]);
  }
}

TEST_CASE("embedding backward: repeated ids add up, dx is zero") {
  std::mt19937 rng(31);
  param_store store;
  context ctx;
  auto e = nn::make_embedding(5, 3);
  store.bind(e.weight, rng);
  const auto ids = tensor_of(shape{2, 3}, {1, 4, 1, 1, 0, 4});
  nn::embedding::cache c;
  tensor<float> y, dx;
  e.forward(ctx, ids, y, c);
  tensor<float> dy(y.shape());
  for (std::size_t i = 0; i < dy.numel(); ++i) dy[i] = static_cast<float>(i + 1);
  zero_grads({&e.weight});
  e.backward(ctx, dy, dx, c);
  // Row 1 gets tokens 0, 2, 3; row 4 gets tokens 1, 5; row 0 token 4; rows 2, 3 nothing.
  const auto g = [&](int row, int j) { return e.weight.grad()[row * 3 + j]; };
  for (int j = 0; j < 3; ++j) {
    CHECK(g(1, j) == dy[0 * 3 + j] + dy[2 * 3 + j] + dy[3 * 3 + j]);
    CHECK(g(4, j) == dy[1 * 3 + j] + dy[5 * 3 + j]);
    CHECK(g(0, j) == dy[4 * 3 + j]);
    CHECK(g(2, j) == 0.0f);
    CHECK(g(3, j) == 0.0f);
  }
  REQUIRE(dx.shape() == ids.shape());
  for (float v : dx.span()) CHECK(v == 0.0f);
}

TEST_CASE("embedding backward matches finite differences, accumulates, reuses outputs") {
  std::mt19937 rng(32);
  param_store store;
  context ctx;
  auto e = nn::make_embedding(9, 4);
  store.bind(e.weight, rng);
  auto ids = random_ids(shape{4, 5}, 9, rng);
  check_gradients(e, ctx, ids, {&e.weight}, rng, {.check_dx = false});
  check_accumulates(e, ctx, ids, {&e.weight}, rng);

  // Threaded path: 4096 tokens of dim 128 over a small vocab, so rows repeat a lot.
  auto big = nn::make_embedding(37, 128);
  store.bind(big.weight, rng);
  auto many = random_ids(shape{64, 64}, 37, rng);
  // Outputs are exact copies, so f's only rounding is its double sum: far inside the
  // sqrt(n)-scaled budget (n = 524288 outputs would allow 2e-2).
  check_gradients(big, ctx, many, {&big.weight}, rng, {.abs_tol = 8e-3, .check_dx = false, .stride = 53});
  check_no_allocation(big, ctx, many, rng);
}

TEST_CASE("embedding: a bad id is an error naming the id, position and vocab") {
  std::mt19937 rng(33);
  param_store store;
  context ctx;
  auto e = nn::make_embedding(10, 4);
  e.weight.name = "embed.weight";
  store.bind(e.weight, rng);
  nn::embedding::cache c;
  tensor<float> y;
  auto msg = message_of<strata::error>([&] { e.forward(ctx, tensor_of(shape{3}, {2, 10, 1}), y, c); });
  CHECK_CONTAINS(msg, "embedding embed: token id 10 at position 1 is out of range for vocab 10");
  msg = message_of<strata::error>([&] { e.forward(ctx, tensor_of(shape{2}, {-1, 0}), y, c); });
  CHECK_CONTAINS(msg, "token id -1 at position 0");
  msg = message_of<strata::error>([&] { e.forward(ctx, tensor_of(shape{2}, {0, 2.5f}), y, c); });
  CHECK_CONTAINS(msg, "token id 2.5 at position 1");
  msg = message_of<strata::error>(
      [&] { e.forward(ctx, tensor_of(shape{1}, {std::numeric_limits<float>::quiet_NaN()}), y, c); });
  CHECK_CONTAINS(msg, "token id nan");
  CHECK_THROWS_AS(e.forward(ctx, tensor<float>(shape{1, 1, 1, 1}), y, c), strata::config_error);
}
