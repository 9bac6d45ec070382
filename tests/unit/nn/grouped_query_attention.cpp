// nn::grouped_query_attention (one tensor-parallel rank) and its rotary embedding against a
// double-precision reference written from transformers' Qwen2 attention (rotate_half,
// repeat_kv, causal softmax), finite differences, causality, += semantics, no allocation
// on reuse, and the messages for head counts that do not fit.
#include <strata/nn/grouped_query_attention.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;

namespace {

// x W^T + b in double, rows [B S, out].
std::vector<double> project(const tensor<float>& x, const nn::column_parallel_linear& l) {
  const std::int64_t rows = static_cast<std::int64_t>(x.numel()) / l.in_features(), in = l.in_features(),
                     out = l.local_out_features();
  std::vector<double> y(rows * out);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double s = l.has_bias() ? l.bias.data()[o] : 0.0;
      for (std::int64_t i = 0; i < in; ++i) s += static_cast<double>(x[r * in + i]) * l.weight.data()[o * in + i];
      y[r * out + o] = s;
    }
  return y;
}

// rotate_half RoPE of rows [B S, heads hd] in double, angles from float inv_freq as
// transformers computes them.
void rope(std::vector<double>& t, std::int64_t S, std::int64_t heads, std::int64_t hd, float theta) {
  const std::int64_t half = hd / 2, rows = static_cast<std::int64_t>(t.size()) / (heads * hd);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < half; ++i) {
        const double inv_freq = 1.0 / std::pow(static_cast<double>(theta), 2.0 * i / hd);
        const double a = static_cast<double>(r % S) * inv_freq, c = std::cos(a), s = std::sin(a);
        double* e = t.data() + r * heads * hd + h * hd;
        const double x1 = e[i], x2 = e[i + half];
        e[i] = x1 * c - x2 * s;
        e[i + half] = x2 * c + x1 * s;
      }
}

std::vector<double> reference(const nn::grouped_query_attention& a, const tensor<float>& x) {
  const std::int64_t B = x.dim(0), S = x.dim(1), D = x.dim(2), H = a.heads, K = a.kv_heads, hd = a.head_dim(),
                     g = H / K;
  auto q = project(x, a.q_proj), k = project(x, a.k_proj), v = project(x, a.v_proj);
  rope(q, S, H, hd, a.rope.theta);
  rope(k, S, K, hd, a.rope.theta);
  std::vector<double> out(B * S * H * hd, 0.0), y(B * S * D);
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < S; ++i) {
        const std::int64_t kh = h / g;  // repeat_kv: query head h reads key/value head h / g
        std::vector<double> p(i + 1);
        double m = -1e300, sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (std::int64_t e = 0; e < hd; ++e)
            s += q[(b * S + i) * H * hd + h * hd + e] * k[(b * S + j) * K * hd + kh * hd + e];
          p[j] = s / std::sqrt(static_cast<double>(hd));
          m = std::max(m, p[j]);
        }
        for (auto& w : p) sum += (w = std::exp(w - m));
        for (std::int64_t j = 0; j <= i; ++j)
          for (std::int64_t e = 0; e < hd; ++e)
            out[(b * S + i) * H * hd + h * hd + e] += p[j] / sum * v[(b * S + j) * K * hd + kh * hd + e];
      }
  const float* wo = a.o_proj.weight.data();
  for (std::int64_t r = 0; r < B * S; ++r)
    for (std::int64_t o = 0; o < D; ++o) {
      double s = 0.0;
      for (std::int64_t i = 0; i < H * hd; ++i) s += out[r * H * hd + i] * wo[o * H * hd + i];
      y[r * D + o] = s;
    }
  return y;
}

struct fixture {
  std::mt19937 rng{17};
  param_store store;
  nn::grouped_query_attention a;
  fixture(int dim, int heads, int kv_heads, float theta = 10000.0f)
      : a(nn::make_grouped_query_attention(dim, heads, kv_heads, theta)) {
    // Weights of +-0.5 keep the scores of order one (see attention.cpp); biases too, so
    // that a bias that is dropped or added twice shows.
    for (auto* p : params()) store.bind(*p, rng, -0.5f, 0.5f);
    a.q_proj.weight.name = "self_attn.q_proj.weight";
  }
  std::vector<param<float>*> params() {
    return {&a.q_proj.weight, &a.q_proj.bias, &a.k_proj.weight, &a.k_proj.bias,
            &a.v_proj.weight, &a.v_proj.bias, &a.o_proj.weight};
  }
};

}  // namespace

TEST_CASE("make_grouped_query_attention: shapes, biases, slices") {
  auto a = nn::make_grouped_query_attention(16, 4, 2, 1e6f);
  CHECK(a.q_proj.weight.shape == shape{16, 16});
  CHECK(a.k_proj.weight.shape == shape{8, 16});
  CHECK(a.v_proj.bias.shape == shape{8});
  CHECK(a.o_proj.weight.shape == shape{16, 16});
  CHECK_FALSE(a.o_proj.has_bias());
  CHECK(a.head_dim() == 4);
  CHECK(a.rope.theta == 1e6f);
  // Rank 1 of 2: query heads 2, 3 and key/value head 1.
  auto t = nn::make_grouped_query_attention(16, 4, 2, 1e6f, 1, 2);
  CHECK(t.local_heads() == 2);
  CHECK(t.local_kv_heads() == 1);
  CHECK(t.k_proj.weight.shape == shape{4, 16});
  CHECK(t.k_proj.weight.shard_offset == 4);
  CHECK(t.o_proj.weight.shard_offset == 8);
}

TEST_CASE("grouped-query attention with rotary embedding matches transformers' computation in double") {
  for (auto [B, S, D, H, K] :
       {std::array<int, 5>{2, 5, 16, 4, 2}, {1, 7, 12, 3, 1}, {2, 4, 16, 4, 4}, {3, 1, 8, 2, 1}}) {
    fixture f(D, H, K, 100.0f);  // a small theta turns even the last pairs visibly in 7 positions
    const auto x = random_tensor(shape{B, S, D}, f.rng);
    context ctx;
    nn::grouped_query_attention::cache c;
    tensor<float> y;
    f.a.forward(ctx, x, y, c);
    REQUIRE(y.shape() == x.shape());
    const auto ref = reference(f.a, x);
    // As for causal_self_attention (2e-5 on four float products and a softmax), plus the
    // rotation's float cos/sin (a few ulp on an O(1) angle): a wrong group, pairing or
    // sign is off by more than 1e-2.
    double worst = 0.0;
    for (std::size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, std::abs(y[i] - ref[i]));
    INFO("B=" << B << " S=" << S << " D=" << D << " H=" << H << " K=" << K << " max error " << worst);
    CHECK(worst <= 2e-5);
  }
}

TEST_CASE("grouped-query attention is causal") {
  fixture f(16, 4, 2);
  auto x = random_tensor(shape{2, 6, 16}, f.rng);
  context ctx;
  nn::grouped_query_attention::cache c;
  tensor<float> y0, y1;
  f.a.forward(ctx, x, y0, c);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t e = 0; e < 16; ++e) x[(b * 6 + 4) * 16 + e] += 0.75f;  // position 4
  f.a.forward(ctx, x, y1, c);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t s = 0; s < 6; ++s)
      for (std::int64_t e = 0; e < 16; ++e) {
        const std::size_t i = static_cast<std::size_t>((b * 6 + s) * 16 + e);
        if (s < 4) REQUIRE(y0[i] == y1[i]);
      }
}

TEST_CASE("grouped-query attention backward matches finite differences, accumulates, reuses") {
  fixture f(16, 4, 2);
  context ctx;
  auto x = random_tensor(shape{2, 5, 16}, f.rng);
  auto ps = f.params();
  check_gradients(f.a, ctx, x, ps, f.rng);
  check_accumulates(f.a, ctx, x, ps, f.rng);
  check_no_allocation(f.a, ctx, x, f.rng);
}

TEST_CASE("rotary_embedding: q and k in one kernel are rotate(q) and rotate(k), bit for bit; inverse turns back") {
  std::mt19937 rng(41);
  context ctx;
  const nn::rotary_embedding rope{1000000.0f};
  tensor<float> cos, sin;
  rope.table(ctx, 7, 16, cos, sin);
  const auto q0 = random_tensor(shape{2, 7, 4 * 16}, rng), k0 = random_tensor(shape{2, 7, 2 * 16}, rng);
  const auto copy = [](const tensor<float>& t) {
    tensor<float> r(t.shape());
    std::copy_n(t.data(), t.numel(), r.data());
    return r;
  };
  tensor<float> q = copy(q0), k = copy(k0), q2 = copy(q0), k2 = copy(k0);
  rope.rotate(ctx, q, 4, 16, cos, sin);
  rope.rotate(ctx, k, 2, 16, cos, sin);
  rope.rotate(ctx, q2, 4, k2, 2, 16, cos, sin);
  CHECK(std::equal(q.data(), q.data() + q.numel(), q2.data()));
  CHECK(std::equal(k.data(), k.data() + k.numel(), k2.data()));
  rope.rotate(ctx, q2, 4, k2, 2, 16, cos, sin, true);
  for (std::size_t i = 0; i < q0.numel(); ++i) REQUIRE(std::abs(q2[i] - q0[i]) <= 1e-6f);
  for (std::size_t i = 0; i < k0.numel(); ++i) REQUIRE(std::abs(k2[i] - k0[i]) <= 1e-6f);
  tensor<float> short_k(shape{2, 6, 2 * 16});
  CHECK_THROWS_AS(rope.rotate(ctx, q2, 4, short_k, 2, 16, cos, sin), strata::config_error);
}

TEST_CASE("grouped-query attention: head counts that do not fit are config errors naming them") {
  CHECK_THROWS_WITH(nn::make_grouped_query_attention(16, 4, 3, 1e4f),
                    strata_test::contains_text("4 query heads do not group evenly over 3"));
  CHECK_THROWS_WITH(nn::make_grouped_query_attention(16, 4, 2, 1e4f, 0, 4),
                    strata_test::contains_text("2 key/value heads do not divide over 4 tensor-parallel ranks"));
  CHECK_THROWS_WITH(nn::make_grouped_query_attention(12, 4, 2, 1e4f),
                    strata_test::contains_text("heads of an even size"));
  fixture f(16, 4, 2);
  context ctx;
  nn::grouped_query_attention::cache c;
  tensor<float> y;
  const auto x = random_tensor(shape{2, 3, 12}, f.rng);
  const auto msg = message_of<strata::config_error>([&] { f.a.forward(ctx, x, y, c); });
  CHECK_CONTAINS(
      msg, "grouped_query_attention self_attn.q_proj: input has shape [2, 3, 12]; expected [batch, sequence, 16]");
}
