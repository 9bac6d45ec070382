// nn::causal_self_attention (at one tensor-parallel rank) against a double-precision
// reference, finite differences, causality, += semantics, no allocation on reuse, and
// the messages for sizes that do not fit.
#include <strata/nn/attention.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

// The host keeps the blocked attention: it has no fused form (fused_attention.hpp).
static_assert(!nn::detail::has_fused_attention<strata::host, float>);

namespace {

// Plain-loop attention in double, from the layer's own float weights: qkv = x Wqkv^T + b,
// rows of Wqkv grouped per head as (q_h, k_h, v_h); softmax over j <= i of q_i.k_j/sqrt(hd);
// out = P V; y = out Wproj^T + b.
std::vector<double> reference(const nn::causal_self_attention& a, const tensor<float>& x) {
  const std::int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), H = a.heads, hd = D / H;
  const float *wq = a.qkv.weight.data(), *bq = a.qkv.bias.data(), *wp = a.proj.weight.data(), *bp = a.proj.bias.data();
  std::vector<double> qkv(B * S * 3 * D), out(B * S * D, 0.0), y(B * S * D);
  for (std::int64_t r = 0; r < B * S; ++r)
    for (std::int64_t o = 0; o < 3 * D; ++o) {
      double s = bq[o];
      for (std::int64_t i = 0; i < D; ++i) s += static_cast<double>(x[r * D + i]) * wq[o * D + i];
      qkv[r * 3 * D + o] = s;
    }
  const auto at = [&](std::int64_t b, std::int64_t s, std::int64_t h, int part, std::int64_t e) {
    return qkv[(b * S + s) * 3 * D + h * 3 * hd + part * hd + e];
  };
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> p(i + 1);
        double m = -1e300, sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (std::int64_t e = 0; e < hd; ++e) s += at(b, i, h, 0, e) * at(b, j, h, 1, e);
          p[j] = s / std::sqrt(static_cast<double>(hd));
          m = std::max(m, p[j]);
        }
        for (auto& v : p) sum += (v = std::exp(v - m));
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t e = 0; e < hd; ++e) out[(b * S + i) * D + h * hd + e] += p[j] / sum * at(b, j, h, 2, e);
      }
  for (std::int64_t r = 0; r < B * S; ++r)
    for (std::int64_t o = 0; o < D; ++o) {
      double s = bp[o];
      for (std::int64_t i = 0; i < D; ++i) s += out[r * D + i] * wp[o * D + i];
      y[r * D + o] = s;
    }
  return y;
}

struct fixture {
  std::mt19937 rng{7};
  param_store store;
  nn::causal_self_attention a;
  fixture(int dim, int heads) : a(nn::make_causal_self_attention(dim, heads)) {
    // Weights of +-0.5 keep the scores of order one: the softmax is neither uniform
    // (which would hide a wrong scale) nor saturated (which would hide the gradient).
    for (auto* p : params()) store.bind(*p, rng, -0.5f, 0.5f);
    a.qkv.weight.name = "qkv.weight";
    a.qkv.bias.name = "qkv.bias";
    a.proj.weight.name = "proj.weight";
    a.proj.bias.name = "proj.bias";
  }
  std::vector<param<float>*> params() { return {&a.qkv.weight, &a.qkv.bias, &a.proj.weight, &a.proj.bias}; }
};

}  // namespace

TEST_CASE("make_causal_self_attention: shapes and slices") {
  auto a = nn::make_causal_self_attention(12, 3);
  CHECK(a.qkv.weight.shape == shape{36, 12});
  CHECK(a.proj.weight.shape == shape{12, 12});
  CHECK(a.head_dim() == 4);
  CHECK(a.local_heads() == 3);
  // Rank 1 of 3 holds head 1: rows 12..23 of the full qkv weight, columns 4..7 of proj.
  auto t = nn::make_causal_self_attention(12, 3, 1, 3);
  CHECK(t.local_heads() == 1);
  CHECK(t.qkv.weight.shape == shape{12, 12});
  CHECK(t.qkv.weight.full_shape == shape{36, 12});
  CHECK(t.qkv.weight.shard_offset == 12);
  CHECK(t.proj.weight.shape == shape{12, 4});
  CHECK(t.proj.weight.shard_dim == 1);
  CHECK(t.proj.weight.global_index(0) == 4);
  CHECK(t.proj.weight.global_index(4) == 16);
  CHECK_FALSE(t.proj.bias.sharded());
}

TEST_CASE("attention forward matches a double reference") {
  for (auto [B, S, D, H] : {std::array<int, 4>{2, 5, 8, 2}, {1, 7, 12, 3}, {3, 1, 4, 1}}) {
    fixture f(D, H);
    const auto x = random_tensor(shape{B, S, D}, f.rng);
    context ctx;
    nn::causal_self_attention::cache c;
    tensor<float> y;
    f.a.forward(ctx, x, y, c);
    REQUIRE(y.shape() == x.shape());
    const auto ref = reference(f.a, x);
    // Outputs are of order one and pass through four float dot products of length <= 36
    // and a softmax: each adds at most ~K * 2^-24 ~ 2e-6 relative, so 2e-5 absolute is a
    // bound with margin; a wrong scale, mask or head layout is off by more than 1e-2.
    double worst = 0.0;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref[i]));
    INFO("B=" << B << " S=" << S << " D=" << D << " H=" << H << " max error " << worst);
    CHECK(worst <= 2e-5);
  }
}

TEST_CASE("attention is causal: a later position never changes an earlier output") {
  fixture f(8, 2);
  auto x = random_tensor(shape{2, 6, 8}, f.rng);
  context ctx;
  nn::causal_self_attention::cache c;
  tensor<float> y0, y1;
  f.a.forward(ctx, x, y0, c);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t e = 0; e < 8; ++e) x[(b * 6 + 4) * 8 + e] += 0.75f;  // position 4
  f.a.forward(ctx, x, y1, c);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t s = 0; s < 6; ++s) {
      double diff = 0.0;
      for (std::int64_t e = 0; e < 8; ++e) diff += std::abs(y1[(b * 6 + s) * 8 + e] - y0[(b * 6 + s) * 8 + e]);
      INFO("batch " << b << " position " << s);
      // Masked scores are exact zeros after the softmax, so earlier rows are bit-identical.
      if (s < 4)
        CHECK(diff == 0.0);
      else
        CHECK(diff > 1e-3);
    }
}

TEST_CASE("attention backward matches finite differences") {
  fixture f(8, 2);
  auto x = random_tensor(shape{2, 5, 8}, f.rng);
  context ctx;
  check_gradients(f.a, ctx, x, f.params(), f.rng);
  SECTION("one position, one head") {
    fixture g(4, 1);
    auto x1 = random_tensor(shape{2, 1, 4}, g.rng);
    check_gradients(g.a, ctx, x1, g.params(), g.rng);
  }
}

TEST_CASE("attention backward accumulates into param grads and allocates nothing on reuse") {
  fixture f(12, 3);
  const auto x = random_tensor(shape{2, 6, 12}, f.rng);
  context ctx;
  check_accumulates(f.a, ctx, x, f.params(), f.rng);
  check_no_allocation(f.a, ctx, x, f.rng);
}

TEST_CASE("attention: sizes that do not fit are config_errors naming the numbers") {
  CHECK_CONTAINS(message_of<strata::config_error>([] { nn::make_causal_self_attention(24, 6, 0, 4); }),
                 "attention: 6 heads do not divide over 4 tensor-parallel ranks");
  CHECK_CONTAINS(message_of<strata::config_error>([] { nn::make_causal_self_attention(10, 3); }),
                 "attention: dim 10 does not split into 3 heads");
  CHECK_CONTAINS(message_of<strata::config_error>([] { nn::make_causal_self_attention(8, 2, 2, 2); }),
                 "tensor-parallel rank 2 is not in [0, 2)");
  fixture f(8, 2);
  context ctx;
  nn::causal_self_attention::cache c;
  tensor<float> y;
  CHECK_CONTAINS(message_of<strata::config_error>([&] { f.a.forward(ctx, tensor<float>(shape{2, 8}), y, c); }),
                 "expected [batch, sequence, 8]");
  CHECK_CONTAINS(message_of<strata::config_error>([&] { f.a.forward(ctx, tensor<float>(shape{1, 3, 6}), y, c); }),
                 "expected [batch, sequence, 8]");
  // A layer holding half the heads cannot run where there is no tensor communicator.
  auto half = nn::make_causal_self_attention(8, 2, 0, 2);
  for (auto* p : {&half.qkv.weight, &half.qkv.bias, &half.proj.weight, &half.proj.bias}) f.store.bind(*p, f.rng);
  CHECK_CONTAINS(message_of<strata::config_error>([&] { half.forward(ctx, tensor<float>(shape{1, 3, 8}), y, c); }),
                 "built for 2 tensor-parallel ranks, but the context has no tensor communicator");
}
