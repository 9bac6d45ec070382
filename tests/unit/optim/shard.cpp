// Decay runs: a shard stepped run by run with each run's decay flag equals stepping
// each param with its own flag; runs merge when they touch; bad tables are rejected;
// elements outside every run (padding) are left alone.
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
}
