// Splitting layers into pipeline stages (parallel/pipeline.hpp): balance_stages gives
// the smallest possible largest stage, with every stage at least one layer and a layer
// without params counting 1, checked against a brute force over every set of cuts;
// stage_layer_range takes given cuts only when they are valid. Also the schedules'
// promises: each micro-batch forward then backward once, backwards in micro-batch order,
// and 1F1B's bound on micro-batches in flight.
#include <algorithm>
#include <cstddef>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/parallel/pipeline.hpp"

using strata::balance_stages;
using strata::stage_layer_range;

namespace {

using sizes = std::vector<std::size_t>;

// The largest stage of a split, each layer weighing its params + 1.
std::size_t largest_stage(const sizes& params, const sizes& cuts) {
  std::size_t worst = 0;
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
    std::size_t w = 0;
    for (std::size_t l = cuts[s]; l < cuts[s + 1]; ++l) w += params[l] + 1;
    worst = std::max(worst, w);
  }
  return worst;
}

// The best largest stage over every way to cut L layers into k non-empty runs.
std::size_t brute_force_best(const sizes& params, int k) {
  const std::size_t L = params.size();
  std::size_t best = static_cast<std::size_t>(-1);
  sizes cuts(static_cast<std::size_t>(k) + 1);
  cuts.front() = 0;
  cuts.back() = L;
  // Choose k - 1 of the L - 1 inner boundaries: walk the combinations in order.
  std::vector<std::size_t> inner(static_cast<std::size_t>(k) - 1);
  for (std::size_t i = 0; i < inner.size(); ++i) inner[i] = i + 1;
  while (true) {
    std::copy(inner.begin(), inner.end(), cuts.begin() + 1);
    best = std::min(best, largest_stage(params, cuts));
    // Next combination of inner boundaries from {1, ..., L - 1}.
    std::size_t i = inner.size();
    while (i > 0 && inner[i - 1] == L - inner.size() + (i - 1)) --i;
    if (i == 0) break;
    ++inner[i - 1];
    for (std::size_t j = i; j < inner.size(); ++j) inner[j] = inner[j - 1] + 1;
  }
  return best;
}

// Cuts are stages + 1 strictly increasing layer indices from 0 to L.
void check_cuts_shape(const sizes& cuts, int stages, std::size_t L) {
  REQUIRE(cuts.size() == static_cast<std::size_t>(stages) + 1);
  CHECK(cuts.front() == 0);
  CHECK(cuts.back() == L);
  for (std::size_t s = 0; s + 1 < cuts.size(); ++s) CHECK(cuts[s] < cuts[s + 1]);
}

}  // namespace

TEST_CASE("balance_stages: hand-computed splits") {
  CHECK(balance_stages({10, 10, 10, 10}, 2) == sizes{0, 2, 4});
  CHECK(balance_stages({10, 10, 10, 10}, 4) == sizes{0, 1, 2, 3, 4});
  CHECK(balance_stages({5, 7, 3}, 1) == sizes{0, 3});
  // One heavy layer: it is a stage of its own, the rest share the other.
  CHECK(balance_stages({1, 1, 100, 1, 1}, 3) == sizes{0, 2, 3, 5});
  // Layers without params count 1, so they spread over the stages too.
  CHECK(balance_stages({0, 0, 0, 0, 0, 0}, 3) == sizes{0, 2, 4, 6});
  CHECK(largest_stage({0, 0, 0, 0, 0, 0}, balance_stages({0, 0, 0, 0, 0, 0}, 3)) == 2);
  // An embedding, blocks and a head: the stages' largest is as small as it can be.
  const sizes gpt{4096, 1000, 1000, 1000, 1000, 0, 4096};
  const sizes cuts = balance_stages(gpt, 3);
  check_cuts_shape(cuts, 3, gpt.size());
  CHECK(largest_stage(gpt, cuts) == brute_force_best(gpt, 3));
}

TEST_CASE("balance_stages: every stage has a layer, even when one layer outweighs all") {
  const sizes p{1000000, 0, 0, 0};
  const sizes cuts = balance_stages(p, 4);
  CHECK(cuts == sizes{0, 1, 2, 3, 4});
  const sizes two = balance_stages({0, 1000000}, 2);
  CHECK(two == sizes{0, 1, 2});
}

TEST_CASE("balance_stages: the optimum of a brute force over every cut, on random models") {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> layer_count(1, 10), kind(0, 5);
  std::uniform_int_distribution<std::size_t> small(1, 50), large(100, 5000);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t L = static_cast<std::size_t>(layer_count(gen));
    sizes p(L);
    for (auto& x : p) {
      const int k = kind(gen);  // zeros, small and large layers mixed
      x = k == 0 ? 0 : k < 4 ? small(gen) : large(gen);
    }
    std::uniform_int_distribution<int> stage_count(1, static_cast<int>(L));
    const int stages = stage_count(gen);
    INFO("trial " << trial << ", " << L << " layers, " << stages << " stages");
    const sizes cuts = balance_stages(p, stages);
    check_cuts_shape(cuts, stages, L);
    CHECK(largest_stage(p, cuts) == brute_force_best(p, stages));
  }
}

TEST_CASE("balance_stages: fewer layers than stages, or no stage, is a config_error") {
  CHECK_THROWS_AS(balance_stages({1, 2, 3}, 4), strata::config_error);
  CHECK_THROWS_WITH(balance_stages({1, 2, 3}, 4), strata_test::contains_text("4 stages for a model of 3 layers") &&
                                                      strata_test::contains_text("every stage needs a layer"));
  CHECK_THROWS_AS(balance_stages({1, 2, 3}, 0), strata::config_error);
  CHECK_THROWS_WITH(balance_stages({1, 2, 3}, 0), strata_test::contains_text("need at least 1"));
  CHECK_THROWS_AS(balance_stages({}, 1), strata::config_error);
}

TEST_CASE("stage_layer_range: given cuts are used when valid, refused otherwise") {
  const sizes p{10, 20, 30, 40, 50};
  // Valid cuts are taken as they are, whatever the balance.
  const sizes cuts{0, 1, 4, 5};
  CHECK(stage_layer_range(p, cuts, 3, 0) == std::pair<std::size_t, std::size_t>{0, 1});
  CHECK(stage_layer_range(p, cuts, 3, 1) == std::pair<std::size_t, std::size_t>{1, 4});
  CHECK(stage_layer_range(p, cuts, 3, 2) == std::pair<std::size_t, std::size_t>{4, 5});
  // No cuts: balanced.
  const sizes balanced = balance_stages(p, 2);
  CHECK(stage_layer_range(p, {}, 2, 0) == std::pair<std::size_t, std::size_t>{balanced[0], balanced[1]});
  CHECK(stage_layer_range(p, {}, 2, 1) == std::pair<std::size_t, std::size_t>{balanced[1], balanced[2]});
  // One stage holds every layer.
  CHECK(stage_layer_range(p, {}, 1, 0) == std::pair<std::size_t, std::size_t>{0, 5});

  const auto bad = [&](const sizes& c) {
    CHECK_THROWS_WITH(stage_layer_range(p, c, 3, 0),
                      strata_test::contains_text("pipeline_cuts must be 4 increasing layer indices from 0 to 5"));
  };
  bad({0, 2, 5});        // too few
  bad({0, 1, 2, 3, 5});  // too many
  bad({1, 2, 3, 5});     // does not start at 0
  bad({0, 2, 3, 4});     // does not end at the layer count
  bad({0, 3, 2, 5});     // decreasing
  bad({0, 2, 2, 5});     // an empty stage
  bad({0, 2, 3, 6});     // past the last layer
  CHECK_THROWS_AS(stage_layer_range(p, {0, 2, 2, 5}, 3, 1), strata::config_error);
  // Cuts given for a single stage are checked as well, not ignored.
  CHECK(stage_layer_range(p, {0, 5}, 1, 0) == std::pair<std::size_t, std::size_t>{0, 5});
  CHECK_THROWS_WITH(stage_layer_range(p, {0, 2, 5}, 1, 0),
                    strata_test::contains_text("pipeline_cuts must be 2 increasing layer indices from 0 to 5"));
}

TEST_CASE("schedules: each micro-batch forward then backward once, backwards in order") {
  for (int stages = 1; stages <= 5; ++stages)
    for (int m = 1; m <= 7; ++m)
      for (int stage = 0; stage < stages; ++stage) {
        INFO(stages << " stages, " << m << " micro-batches, stage " << stage);
        const auto check = [&](const std::vector<strata::pipeline_action>& a, int max_in_flight) {
          REQUIRE(a.size() == 2 * static_cast<std::size_t>(m));
          std::vector<int> forwards, backwards;
          int in_flight = 0, peak = 0;
          for (const auto& x : a) {
            if (x.forward) {
              forwards.push_back(x.micro_batch);
              peak = std::max(peak, ++in_flight);
            } else {
              // Its forward ran already.
              CHECK(std::find(forwards.begin(), forwards.end(), x.micro_batch) != forwards.end());
              backwards.push_back(x.micro_batch);
              --in_flight;
            }
          }
          std::vector<int> order(static_cast<std::size_t>(m));
          for (int i = 0; i < m; ++i) order[static_cast<std::size_t>(i)] = i;
          CHECK(forwards == order);
          CHECK(backwards == order);  // the gradients accumulate in the same order
          CHECK(peak <= max_in_flight);
        };
        check(strata::schedule_for<strata::gpipe>(stage, stages, m), m);
        check(strata::schedule_for<strata::one_f_one_b>(stage, stages, m), std::min(m, stages - stage));
      }
}
