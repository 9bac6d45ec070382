// Layers composed the way a user writes a model (DESIGN §2): an mlp_block aggregate with
// fc1, gelu, fc2 and a residual that keeps its sublayers' caches in its own, and a small
// classifier whose fields are layers, reflected with Boost.PFR to bind every param.
#include <omp.h>

#include <algorithm>
#include <boost/pfr.hpp>
#include <cmath>
#include <cstring>
#include <strata/nn/all.hpp>
#include <type_traits>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

// A transformer-style MLP: y = x + fc2(gelu(fc1(x))).
struct mlp_block {
  nn::linear fc1;
  nn::gelu act;
  nn::linear fc2;

  struct cache {
    nn::linear::cache<> fc1, fc2;
    nn::gelu::cache<> act;
    // Activations inside the block live here: the sublayer caches point at them, so a
    // cache must stay where it is between forward and backward.
    tensor<float> h, a;
    tensor<float> da, dh;
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor<float>& x, tensor<float>& y, cache& c) const {
    fc1.forward(ctx, x, c.h, c.fc1);
    act.forward(ctx, c.h, c.a, c.act);
    fc2.forward(ctx, c.a, y, c.fc2);
    for (std::size_t i = 0; i < y.numel(); ++i) y[i] += x[i];
  }
  template <class Ctx>
  void backward(Ctx& ctx, const tensor<float>& dy, tensor<float>& dx, cache& c) {
    fc2.backward(ctx, dy, c.da, c.fc2);
    act.backward(ctx, c.da, c.dh, c.act);
    fc1.backward(ctx, c.dh, dx, c.fc1);
    for (std::size_t i = 0; i < dx.numel(); ++i) dx[i] += dy[i];
  }
};

mlp_block make_block(int dim, int hidden) { return {nn::make_linear(dim, hidden), {}, nn::make_linear(hidden, dim)}; }

// A whole model: token ids -> loss. As one forward/backward it is the chain a trainer
// runs, which lets the finite-difference check cover every param at once.
struct classifier {
  nn::embedding embed;
  mlp_block block;
  nn::layer_norm norm;
  nn::linear head;
  nn::softmax_cross_entropy loss;

  struct cache {
    nn::embedding::cache<> embed;
    mlp_block::cache block;
    nn::layer_norm::cache<> norm;
    nn::linear::cache<> head;
    nn::softmax_cross_entropy::cache<> loss;
    tensor<float> e, b, n, logits;
    tensor<float> dlogits, dn, db, de;
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor<float>& ids, tensor<float>& y, cache& c) const {
    embed.forward(ctx, ids, c.e, c.embed);
    block.forward(ctx, c.e, c.b, c.block);
    norm.forward(ctx, c.b, c.n, c.norm);
    head.forward(ctx, c.n, c.logits, c.head);
    loss.forward(ctx, c.logits, y, c.loss);
  }
  template <class Ctx>
  void backward(Ctx& ctx, const tensor<float>& dy, tensor<float>& dids, cache& c) {
    loss.backward(ctx, dy, c.dlogits, c.loss);
    head.backward(ctx, c.dlogits, c.dn, c.head);
    norm.backward(ctx, c.dn, c.db, c.norm);
    block.backward(ctx, c.db, c.de, c.block);
    embed.backward(ctx, c.de, dids, c.embed);
  }
};

// Every param of an aggregate in field order, through nested aggregates; scalar
// settings (layer_norm's eps, gelu's approximation) are not params and are skipped.
template <class T>
void collect_params(T& agg, std::vector<param<float>*>& out) {
  boost::pfr::for_each_field(agg, [&](auto& field) {
    using F = std::remove_cvref_t<decltype(field)>;
    if constexpr (strata::is_param_v<F>)
      out.push_back(&field);
    else if constexpr (std::is_aggregate_v<F>)
      collect_params(field, out);
  });
}

}  // namespace

TEST_CASE("layers are aggregates that Boost.PFR reflects field by field") {
  static_assert(std::is_aggregate_v<nn::linear> && boost::pfr::tuple_size_v<nn::linear> == 2);
  static_assert(std::is_aggregate_v<nn::embedding> && boost::pfr::tuple_size_v<nn::embedding> == 1);
  static_assert(std::is_aggregate_v<nn::layer_norm> && boost::pfr::tuple_size_v<nn::layer_norm> == 3);
  static_assert(boost::pfr::tuple_size_v<nn::gelu> == 1 && boost::pfr::tuple_size_v<nn::relu> == 0);
  static_assert(boost::pfr::tuple_size_v<nn::softmax_cross_entropy> == 0 && boost::pfr::tuple_size_v<nn::mse> == 0);
  static_assert(boost::pfr::tuple_size_v<mlp_block> == 3 && boost::pfr::tuple_size_v<classifier> == 5);

  classifier m{nn::make_embedding(10, 6), make_block(6, 12), nn::make_layer_norm(6), nn::make_linear(6, 4, false), {}};
  std::vector<param<float>*> ps;
  collect_params(m, ps);
  // embed.weight, fc1.{weight,bias}, fc2.{weight,bias}, norm.{weight,bias}, head.{weight,bias}
  REQUIRE(ps.size() == 9);
  CHECK(ps[0] == &m.embed.weight);
  CHECK(ps[1] == &m.block.fc1.weight);
  CHECK(ps[4] == &m.block.fc2.bias);
  CHECK(ps[8] == &m.head.bias);
  CHECK(ps[8]->numel() == 0);  // a bias-free head still has its (empty) field
}

TEST_CASE("mlp_block: forward equals its parts, backward matches finite differences") {
  std::mt19937 rng(50);
  param_store store;
  context ctx;
  auto blk = make_block(8, 16);
  for (auto* p : {&blk.fc1.weight, &blk.fc1.bias, &blk.fc2.weight, &blk.fc2.bias}) store.bind(*p, rng, -0.5f, 0.5f);
  auto x = random_tensor(shape{3, 2, 8}, rng);

  mlp_block::cache c;
  tensor<float> y;
  blk.forward(ctx, x, y, c);
  REQUIRE(y.shape() == x.shape());
  // Reference in double: x + W2 gelu(W1 x + b1) + b2.
  for (std::int64_t r = 0; r < 6; ++r)
    for (std::int64_t o = 0; o < 8; ++o) {
      double s = x[r * 8 + o] + blk.fc2.bias.data()[o], scale = std::abs(s);
      for (std::int64_t k = 0; k < 16; ++k) {
        double h = blk.fc1.bias.data()[k];
        for (std::int64_t i = 0; i < 8; ++i) h += double(x[r * 8 + i]) * blk.fc1.weight.data()[k * 8 + i];
        const double a = 0.5 * h * (1.0 + std::erf(h / std::sqrt(2.0)));
        s += a * blk.fc2.weight.data()[o * 16 + k];
        scale += std::abs(a * blk.fc2.weight.data()[o * 16 + k]);
      }
      // Two float GEMMs of length <= 16 and a float gelu: 1e-5 of the term magnitudes.
      REQUIRE(std::abs(y[r * 8 + o] - s) <= 1e-5 * (scale + 1.0));
    }

  std::vector<param<float>*> ps;
  collect_params(blk, ps);
  REQUIRE(ps.size() == 4);
  check_gradients(blk, ctx, x, ps, rng);
  check_accumulates(blk, ctx, x, ps, rng);
  check_no_allocation(blk, ctx, x, rng);
}

TEST_CASE("a classifier of layers: the loss gradient of every param matches finite differences") {
  std::mt19937 rng(51);
  param_store store;
  context ctx;
  classifier m{nn::make_embedding(10, 6), make_block(6, 12), nn::make_layer_norm(6), nn::make_linear(6, 5), {}};
  std::vector<param<float>*> ps;
  collect_params(m, ps);
  for (auto* p : ps) store.bind(*p, rng, -0.5f, 0.5f);
  auto ids = tensor_of(shape{2, 4}, {1, 7, 7, 0, 9, 3, 1, 1});
  ctx.t = tensor_of(shape{2, 4}, {0, 4, 2, 2, 1, 3, 0, 4});
  // The output is one float loss of order 2: as for the losses alone, 1e-4 absolute.
  const auto rep = check_gradients(m, ctx, ids, ps, rng, {.abs_tol = 1e-4, .check_dx = false});
  CHECK(rep.checked == 60 + 6 * 12 + 12 + 12 * 6 + 6 + 6 + 6 + 6 * 5 + 5);
  check_no_allocation(m, ctx, ids, rng);
}

TEST_CASE("a block repeats its bits at one thread count; across counts only GEMM splits differ") {
  // Sizes above the threading threshold for every layer. strata's own loops sum in an
  // order no thread count changes (tests/unit/space/ops.cpp holds each to its bits at 1
  // and 2 threads), but OpenBLAS's GEMMs follow OpenMP's count and their bits depend on
  // how many threads split them (docs/architecture.md, host threads).
  std::mt19937 rng(52);
  param_store store;
  context ctx;
  classifier m{
      nn::make_embedding(50, 128), make_block(128, 256), nn::make_layer_norm(128), nn::make_linear(128, 10), {}};
  std::vector<param<float>*> ps;
  collect_params(m, ps);
  for (auto* p : ps) store.bind(*p, rng, -0.2f, 0.2f);
  tensor<float> ids(shape{8, 64});
  std::uniform_int_distribution<int> tok(0, 49), cls(0, 9);
  for (auto& v : ids.span()) v = static_cast<float>(tok(rng));
  ctx.t = tensor<float>(shape{8, 64});
  for (auto& v : ctx.t.span()) v = static_cast<float>(cls(rng));

  const auto run = [&](int threads) {
    omp_set_num_threads(threads);
    classifier::cache c;
    tensor<float> y, dids;
    zero_grads(ps);
    m.forward(ctx, ids, y, c);
    m.backward(ctx, tensor_of(shape{1}, {1.0f}), dids, c);
    std::vector<float> out{y[0]};
    for (auto* p : ps) out.insert(out.end(), p->grads().begin(), p->grads().end());
    return out;
  };
  const auto one = run(1);
  const auto two = run(2);
  const auto again = run(2);
  REQUIRE(one.size() == two.size());
  CHECK(std::memcmp(again.data(), two.data(), two.size() * sizeof(float)) == 0);
  // A reordered fp32 sum of at most 512 terms moves by a few ulps of its largest terms:
  // 1e-4 of the largest value is far above that and far below any real difference.
  float scale = 0, worst = 0;
  for (std::size_t i = 0; i < one.size(); ++i) {
    scale = std::max(scale, std::abs(two[i]));
    worst = std::max(worst, std::abs(one[i] - two[i]));
  }
  CHECK(worst <= 1e-4f * scale);
}
