// The host's blocked attention (nn/detail/attention_blocked.hpp) against the full form it
// replaced there (every [S, S] probability stored, one softmax per row), which a GPU still
// runs: forward outputs and the three gradients, multi-head and grouped-query, at lengths
// below, at and across the block; what it stores; and its bits at any thread count.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <strata/nn/detail/attention_core.hpp>
#include <strata/space/host_ops.hpp>

#include "relative_distance.hpp"
#include "support.hpp"

using namespace nn_test;
namespace sd = strata::nn::detail;

namespace {

struct shape_case {
  std::int64_t B, S, H, hd, group;
};

// q, k, v in one [B, S, (H + 2 H / group) hd] buffer each row laid out as q | k | v, so
// the strides are those of a real layer (rows longer than a head).
struct problem {
  shape_case c;
  sd::attention_layout l;
  std::vector<float> qkv, d_out;
  problem(shape_case sc, std::uint32_t seed) : c(sc) {
    const std::int64_t K = c.H / c.group, row = (c.H + 2 * K) * c.hd;
    l = {c.B, c.S, c.H, c.hd, c.group, row, c.hd, row, c.hd};
    std::mt19937 rng(seed);
    // Scores of order a few units: the softmax neither uniform nor one-hot.
    std::uniform_real_distribution<float> u(-1.5f, 1.5f);
    qkv.resize(static_cast<std::size_t>(c.B * c.S * row));
    for (auto& v : qkv) v = u(rng);
    d_out.resize(static_cast<std::size_t>(c.B * c.S * c.H * c.hd));
    for (auto& v : d_out) v = u(rng);
  }
  const float* q() const { return qkv.data(); }
  const float* k() const { return qkv.data() + c.H * c.hd; }
  const float* v() const { return qkv.data() + (c.H + c.H / c.group) * c.hd; }
};

struct result {
  std::vector<float> out, dqkv;
};

result run_full(const problem& p) {
  context ctx;
  result r;
  r.out.resize(p.d_out.size());
  r.dqkv.assign(p.qkv.size(), 0.0f);
  std::vector<float> probs(static_cast<std::size_t>(p.c.B * p.c.H * p.c.S * p.c.S));
  sd::attention_forward_full(ctx, p.l, p.q(), p.k(), p.v(), probs.data(), r.out.data());
  tensor<float> d_scores;
  float* dq = r.dqkv.data();
  sd::attention_backward_full(ctx, p.l, p.q(), p.k(), p.v(), probs.data(), p.d_out.data(), dq, dq + p.c.H * p.c.hd,
                              dq + (p.c.H + p.c.H / p.c.group) * p.c.hd, d_scores);
  return r;
}

result run_blocked(const problem& p, tensor<float>* saved_out = nullptr) {
  context ctx;
  result r;
  r.out.resize(p.d_out.size());
  r.dqkv.assign(p.qkv.size(), 0.0f);
  sd::attention_saved<strata::host> saved;
  tensor<float> d_scores;
  sd::attention_forward(ctx, p.l, p.q(), p.k(), p.v(), saved, r.out.data());
  float* dq = r.dqkv.data();
  sd::attention_backward(ctx, p.l, p.q(), p.k(), p.v(), saved, r.out.data(), p.d_out.data(), dq, dq + p.c.H * p.c.hd,
                         dq + (p.c.H + p.c.H / p.c.group) * p.c.hd, d_scores);
  CHECK(saved.probs.capacity() == 0);  // the host keeps no probabilities
  CHECK_FALSE(saved.fused);
  if (saved_out) *saved_out = std::move(saved.stats);
  CHECK(d_scores.shape() == tensor<float>().shape());  // untouched: no [S, S] scratch either
  return r;
}

}  // namespace

TEST_CASE("blocked attention matches the full form, multi-head and grouped-query, across block edges") {
  for (const shape_case c : {shape_case{2, 1, 2, 8, 1}, shape_case{2, 63, 2, 16, 1}, shape_case{1, 64, 3, 32, 1},
                             shape_case{2, 65, 4, 16, 2}, shape_case{1, 130, 6, 32, 3}, shape_case{1, 200, 2, 64, 2}}) {
    const problem p(c, static_cast<std::uint32_t>(c.S * 31 + c.group));
    const result full = run_full(p), blocked = run_blocked(p);
    INFO("B " << c.B << " S " << c.S << " H " << c.H << " hd " << c.hd << " group " << c.group);
    // Both are float computations of the same sums in other orders (key blocks rescaled as
    // the running max moves; probabilities recomputed from the log-sum-exp in backward):
    // a few float roundings per term over chains of three GEMMs: 2e-7 normwise measured
    // (float's epsilon is 1.2e-7). 2e-6 leaves a factor of ten and fails on any wrong
    // mask, scale or block offset (>= 1e-2).
    CHECK(test::relative_distance(blocked.out, full.out) < 2e-6);
    CHECK(test::relative_distance(blocked.dqkv, full.dqkv) < 2e-6);
  }
}

TEST_CASE("blocked attention stores a log-sum-exp per row, not S x S probabilities") {
  const problem p({2, 130, 4, 16, 2}, 5);
  tensor<float> saved;
  (void)run_blocked(p, &saved);
  CHECK(saved.shape() == shape{2, 4, 130});
  // Each lse is the log of its row's softmax denominator: rows of P sum to 1 again.
  std::vector<float> full_out(p.d_out.size());
  std::vector<float> probs(static_cast<std::size_t>(2 * 4 * 130 * 130));
  context ctx;
  sd::attention_forward_full(ctx, p.l, p.q(), p.k(), p.v(), probs.data(), full_out.data());
  const float scale = sd::attention_scale(p.c.hd);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 4; ++h)
      for (std::int64_t i = 0; i < 130; i += 43) {
        double sum = 0.0;
        for (std::int64_t j = 0; j <= i; ++j) {
          double s = 0.0;
          for (std::int64_t e = 0; e < p.c.hd; ++e)
            s += static_cast<double>(p.q()[(b * 130 + i) * p.l.ldq + h * p.l.q_head + e]) *
                 p.k()[(b * 130 + j) * p.l.ldkv + (h / 2) * p.l.kv_head + e];
          sum += std::exp(scale * s - saved[static_cast<std::size_t>((b * 4 + h) * 130 + i)]);
        }
        CHECK_ABS(sum, 1.0, 1e-5);
      }
}

TEST_CASE("blocked attention gives the same bits at 1 and 2 threads, run after run") {
  const problem p({2, 100, 4, 16, 2}, 9);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const result one = run_blocked(p);
  omp_set_num_threads(2);
  const result two = run_blocked(p), again = run_blocked(p);
  omp_set_num_threads(threads);
  CHECK(std::memcmp(one.out.data(), two.out.data(), one.out.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(one.dqkv.data(), two.dqkv.data(), one.dqkv.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(two.dqkv.data(), again.dqkv.data(), two.dqkv.size() * sizeof(float)) == 0);
}
