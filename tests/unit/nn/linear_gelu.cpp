// A linear and the GELU after it as one call (column_parallel_linear::forward with a gelu,
// GPT-2's fc1), and a linear's backward carried on through the GELU before it
// (row_parallel_linear::backward with a gelu, GPT-2's fc2): on the host, which fuses no
// GEMM, the bits of the layers called one by one, in both GELU forms; and the errors.
#include <cstring>
#include <strata/nn/gelu.hpp>
#include <strata/nn/tp/column_parallel_linear.hpp>
#include <strata/nn/tp/row_parallel_linear.hpp>
#include <strata/space/host_ops.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

bool same_bits(const tensor<float>& a, const tensor<float>& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), a.numel() * sizeof(float)) == 0;
}
std::vector<float> grads_of(const param<float>& p) { return {p.grad(), p.grad() + p.numel()}; }

}  // namespace

TEST_CASE("column_parallel_linear then gelu in one call: the layers' bits, caches set for backward") {
  for (const auto form : {nn::gelu_approximation::tanh, nn::gelu_approximation::none}) {
    for (const bool bias : {true, false}) {
      INFO("tanh form: " << (form == nn::gelu_approximation::tanh) << ", bias: " << bias);
      std::mt19937 rng(7);
      param_store store;
      nn::column_parallel_linear fc = nn::make_column_parallel_linear(12, 24, 0, 1, bias);
      store.bind(fc.weight, rng);
      store.bind(fc.bias, rng);
      const nn::gelu act{form};
      context ctx;
      const auto x = random_tensor(shape{3, 5, 12}, rng, -2.0f, 2.0f);

      nn::column_parallel_linear::cache<> c1, c2;
      nn::gelu::cache<> a1, a2;
      tensor<float> u1, g1, u2, g2;
      fc.forward(ctx, x, u1, c1);
      act.forward(ctx, u1, g1, a1);
      fc.forward(ctx, x, u2, c2, act, g2, a2);
      CHECK(same_bits(u1, u2));
      CHECK(same_bits(g1, g2));
      CHECK(c2.x == &x);
      CHECK(a2.x == &u2);  // GELU's backward reads its input from here
    }
  }
}

TEST_CASE("row_parallel_linear backward through gelu: the bits of its backward then gelu's") {
  for (const auto form : {nn::gelu_approximation::tanh, nn::gelu_approximation::none}) {
    INFO("tanh form: " << (form == nn::gelu_approximation::tanh));
    std::mt19937 rng(8);
    param_store s1, s2;
    nn::row_parallel_linear a = nn::make_row_parallel_linear(24, 12, 0, 1), b = a;
    // The same values and zero gradients on both: each backward adds into its own.
    for (auto [p, q] : {std::pair{&a.weight, &b.weight}, std::pair{&a.bias, &b.bias}}) {
      std::mt19937 same(static_cast<unsigned>(p->numel()));
      s1.bind(*p, same);
      same.seed(static_cast<unsigned>(p->numel()));
      s2.bind(*q, same);
    }
    nn::gelu act{form};
    context ctx;
    const auto u = random_tensor(shape{3, 5, 24}, rng, -3.0f, 3.0f);
    const auto dy = random_tensor(shape{3, 5, 12}, rng);

    // One by one, as GPT-2's block ran them: gelu, fc2, fc2's backward, gelu's backward.
    nn::gelu::cache<> ac1, ac2;
    nn::row_parallel_linear::cache<> c1, c2;
    tensor<float> g1, y1, dg1, du1, g2, y2, du2;
    act.forward(ctx, u, g1, ac1);
    a.forward(ctx, g1, y1, c1);
    a.backward(ctx, dy, dg1, c1);
    act.backward(ctx, dg1, du1, ac1);

    act.forward(ctx, u, g2, ac2);
    b.forward(ctx, g2, y2, c2);
    du2.resize(shape{1});  // resized by the call
    b.backward(ctx, dy, du2, c2, act, ac2);
    CHECK(same_bits(du1, du2));
    CHECK(grads_of(a.weight) == grads_of(b.weight));
    CHECK(grads_of(a.bias) == grads_of(b.bias));
  }
}

TEST_CASE("backward through gelu: a gelu that did not run, or of another shape, is a config_error") {
  std::mt19937 rng(9);
  param_store store;
  nn::row_parallel_linear fc = nn::make_row_parallel_linear(8, 4, 0, 1);
  fc.weight.name = "blocks.2.fc2.weight";
  store.bind(fc.weight, rng);
  store.bind(fc.bias, rng);
  context ctx;
  const nn::gelu act{nn::gelu_approximation::tanh};
  const auto g = random_tensor(shape{2, 8}, rng);
  nn::row_parallel_linear::cache<> c;
  tensor<float> y, du;
  fc.forward(ctx, g, y, c);
  const auto dy = random_tensor(shape{2, 4}, rng);

  nn::gelu::cache<> none;
  CHECK_CONTAINS(message_of<strata::config_error>([&] { fc.backward(ctx, dy, du, c, act, none); }),
                 "row_parallel_linear blocks.2.fc2 backward through gelu: gelu's cache was filled by no forward");

  nn::gelu::cache<> other;
  const auto wide = random_tensor(shape{2, 9}, rng);
  tensor<float> wide_out;
  act.forward(ctx, wide, wide_out, other);
  CHECK_CONTAINS(message_of<strata::config_error>([&] { fc.backward(ctx, dy, du, c, act, other); }),
                 "row_parallel_linear blocks.2.fc2 backward through gelu: gelu's input has shape [2, 9], this "
                 "layer's input [2, 8]");
}
