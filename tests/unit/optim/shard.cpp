// Decay runs: a shard stepped run by run with each run's decay flag equals stepping
// each param with its own flag; runs merge when they touch; bad tables are rejected;
// elements outside every run (padding) are left alone.
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/optim/adamw.hpp"
#include "strata/optim/lion.hpp"
#include "strata/optim/sgd.hpp"

using strata::decay_run;

namespace {
std::vector<float> randoms(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}
}  // namespace

TEST_CASE("add_decay_run merges touching runs with the same flag") {
  std::vector<decay_run> runs;
  strata::add_decay_run(runs, 0, 100, true);
  strata::add_decay_run(runs, 100, 50, true);   // merges
  strata::add_decay_run(runs, 150, 0, false);   // empty: ignored
  strata::add_decay_run(runs, 150, 10, false);  // new flag
  strata::add_decay_run(runs, 164, 6, false);   // a gap (padding): new run
  strata::add_decay_run(runs, 170, 30, false);  // merges
  CHECK(runs == std::vector<decay_run>{{0, 150, true}, {150, 10, false}, {164, 36, false}});
  CHECK_THROWS_AS(strata::add_decay_run(runs, 190, 5, true), strata::config_error);  // overlaps
}

template <class O>
void check_runs(const O& opt) {
  // Layout of a shard: [matrix 0..300 decays][bias 300..316 no][pad 316..320][matrix 320..1000 decays]
  const std::size_t n = 1000;
  std::vector<decay_run> runs;
  strata::add_decay_run(runs, 0, 300, true);
  strata::add_decay_run(runs, 300, 16, false);
  strata::add_decay_run(runs, 320, 680, true);
  const std::vector<float> g = randoms(n, 1);
  std::vector<float> p = randoms(n, 2), s0(n), s1(n);
  std::vector<float> q = p, t0(n), t1(n);
  for (long step = 1; step <= 3; ++step) {
    strata::step_runs(opt, strata::shard_args<float, float>{p.data(), g.data(), s0.data(), s1.data(), nullptr, n},
                      std::span<const decay_run>(runs), 1e-2f, 1.0f, step);
    // The same thing param by param.
    auto one = [&](std::size_t lo, std::size_t cnt, bool decay) {
      opt.step(
          strata::shard_args<float, float>{q.data() + lo, g.data() + lo, t0.data() + lo, t1.data() + lo, nullptr, cnt},
          1e-2f, 1.0f, decay, step);
    };
    one(0, 300, true);
    one(300, 16, false);
    one(320, 680, true);
  }
  CHECK(std::memcmp(p.data(), q.data(), n * sizeof(float)) == 0);
  const std::vector<float> p0 = randoms(n, 2);
  for (std::size_t i = 316; i < 320; ++i) CHECK(p[i] == p0[i]);  // padding untouched
  // Decay made a difference where it applied (the decayed params shrank more).
  std::vector<float> nd = p0, n0(n), n1(n);
  for (long step = 1; step <= 3; ++step)
    opt.step(strata::shard_args<float, float>{nd.data(), g.data(), n0.data(), n1.data(), nullptr, n}, 1e-2f, 1.0f,
             false, step);
  CHECK(p[310] == nd[310]);
  CHECK(p[10] != nd[10]);
}

TEST_CASE("step_runs == per-param steps with per-param decay") {
  SECTION("adamw") { check_runs(strata::adamw{.weight_decay = 0.1f}); }
  SECTION("sgd") { check_runs(strata::sgd{.momentum = 0.9f, .weight_decay = 0.1f}); }
  SECTION("lion") { check_runs(strata::lion{.weight_decay = 0.1f}); }
}

// A run's compute copy goes out_shift elements along param_out (a trainer's ZeRO-1/2
// write each bucket's piece where it sits in the full params): the same values as the
// unshifted step writes, at the shifted places, and nothing else of param_out touched.
template <class P>
void check_shifted_copy(const strata::adamw& opt) {
  const std::size_t n = 1000;
  const std::vector<decay_run> plain{{0, 300, true}, {300, 16, false}, {320, 680, true}};
  std::vector<decay_run> shifted = plain;
  shifted[0].out_shift = 1200;  // past the shard's end
  shifted[1].out_shift = -300;  // to the front
  shifted[2].out_shift = 3;     // not a multiple of any vector width
  const std::vector<float> g = randoms(n, 1);
  std::vector<float> p = randoms(n, 2), s0(n), s1(n), q = p, t0(n), t1(n);
  const P untouched = P(-7.0f);
  std::vector<P> out(n, untouched), out_shifted(2200, untouched);
  for (long step = 1; step <= 2; ++step) {
    strata::step_runs(opt, strata::shard_args<P, float>{p.data(), g.data(), s0.data(), s1.data(), out.data(), n},
                      std::span<const decay_run>(plain), 1e-2f, 1.0f, step);
    strata::step_runs(opt,
                      strata::shard_args<P, float>{q.data(), g.data(), t0.data(), t1.data(), out_shifted.data(), n},
                      std::span<const decay_run>(shifted), 1e-2f, 1.0f, step);
  }
  CHECK(std::memcmp(p.data(), q.data(), n * sizeof(float)) == 0);
  std::vector<bool> written(out_shifted.size(), false);
  for (const auto& r : shifted)
    for (std::size_t i = r.offset; i < r.offset + r.count; ++i) {
      const auto at = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(i) + r.out_shift);
      CHECK(std::memcmp(&out_shifted[at], &out[i], sizeof(P)) == 0);
      const P want = strata::round_to<P>(p[i]);  // the updated master, rounded once
      CHECK(std::memcmp(&out[i], &want, sizeof(P)) == 0);
      written[at] = true;
    }
  for (std::size_t i = 0; i < out_shifted.size(); ++i)
    if (!written[i]) CHECK(std::memcmp(&out_shifted[i], &untouched, sizeof(P)) == 0);
}

TEST_CASE("a run's compute copy is written out_shift along param_out") {
  SECTION("fp32 copy") { check_shifted_copy<float>(strata::adamw{.weight_decay = 0.1f}); }
  SECTION("bf16 copy") { check_shifted_copy<strata::bf16>(strata::adamw{.weight_decay = 0.1f}); }
}

TEST_CASE("step_runs rejects tables that are unsorted, overlapping or outside the shard") {
  std::vector<float> p(100), g(100), s0(100), s1(100);
  const strata::shard_args<float, float> a{p.data(), g.data(), s0.data(), s1.data(), nullptr, 100};
  const std::vector<decay_run> outside{{90, 20, true}}, overlap{{0, 50, true}, {40, 10, false}};
  CHECK_THROWS_AS(strata::step_runs(strata::adamw{}, a, std::span<const decay_run>(outside), 1e-3f, 1.0f, 1),
                  strata::config_error);
  CHECK_THROWS_AS(strata::step_runs(strata::adamw{}, a, std::span<const decay_run>(overlap), 1e-3f, 1.0f, 1),
                  strata::config_error);
}

TEST_CASE("optimizer policies satisfy the concept the trainer uses") {
  STATIC_REQUIRE(strata::optimizer<strata::sgd>);
  STATIC_REQUIRE(strata::optimizer<strata::adamw>);
  STATIC_REQUIRE(strata::optimizer<strata::lion>);
  STATIC_REQUIRE(strata::adamw::state_slots == 2);
  STATIC_REQUIRE(strata::sgd::state_slots == 1);
  STATIC_REQUIRE(strata::lion::state_slots == 1);
  // The trainer lets their steps write the compute params (one pass over the master).
  STATIC_REQUIRE(strata::writes_param_out<strata::adamw>);
  STATIC_REQUIRE(strata::writes_param_out<strata::sgd>);
  STATIC_REQUIRE(strata::writes_param_out<strata::lion>);
  STATIC_REQUIRE(!strata::writes_param_out<int>);
}
