// nn::position_embedding: exact sums, finite differences, += semantics, no allocation on
// reuse, sequences shorter than the table, and the messages for bad shapes.
#include <strata/nn/position_embedding.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

TEST_CASE("position_embedding adds row s of the table at position s") {
  std::mt19937 rng(3);
  param_store store;
  auto pe = nn::make_position_embedding(6, 4);
  CHECK(pe.weight.shape == shape{6, 4});
  CHECK(pe.weight.init.k == strata::init_spec::kind::normal);
  store.bind(pe.weight, rng);
  context ctx;
  nn::position_embedding::cache c;
  tensor<float> y;
  for (const shape s : {shape{2, 6, 4}, shape{3, 2, 4}, shape{5, 4}}) {
    const auto x = random_tensor(s, rng);
    pe.forward(ctx, x, y, c);
    REQUIRE(y.shape() == x.shape());
    const std::int64_t S = s[s.rank - 2], rows = static_cast<std::int64_t>(x.numel()) / (S * 4);
    // One float addition per element: exact against the same addition done here.
    for (std::int64_t b = 0; b < rows; ++b)
      for (std::int64_t p = 0; p < S; ++p)
        for (std::int64_t e = 0; e < 4; ++e) {
          const std::int64_t i = (b * S + p) * 4 + e;
          REQUIRE(y[i] == x[i] + pe.weight.data()[p * 4 + e]);
        }
  }
}

TEST_CASE("position_embedding backward: finite differences, accumulation, no allocation") {
  std::mt19937 rng(4);
  param_store store;
  auto pe = nn::make_position_embedding(5, 3);
  store.bind(pe.weight, rng);
  pe.weight.name = "position.weight";
  context ctx;
  auto x = random_tensor(shape{3, 4, 3}, rng);  // shorter than the table: row 4 gets no gradient
  check_gradients(pe, ctx, x, {&pe.weight}, rng);
  check_accumulates(pe, ctx, x, {&pe.weight}, rng);
  check_no_allocation(pe, ctx, x, rng);
}

TEST_CASE("position_embedding: bad shapes name the numbers") {
  std::mt19937 rng(5);
  param_store store;
  auto pe = nn::make_position_embedding(4, 3);
  store.bind(pe.weight, rng);
  context ctx;
  nn::position_embedding::cache c;
  tensor<float> y;
  CHECK_CONTAINS(message_of<strata::config_error>([&] { pe.forward(ctx, tensor<float>(shape{2, 5, 3}), y, c); }),
                 "with 1 <= S <= 4");
  CHECK_CONTAINS(message_of<strata::config_error>([&] { pe.forward(ctx, tensor<float>(shape{2, 4, 2}), y, c); }),
                 "expected [B, S, 3]");
  CHECK_CONTAINS(message_of<strata::config_error>([] { nn::make_position_embedding(0, 3); }), "sizes must be positive");
}
