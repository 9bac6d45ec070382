// The grid's arithmetic for every factorisation of 8 ranks, checked against Megatron's
// formula rank = tp + tp_size * (dp + dp_size * pp), and the errors of grids that do not fit.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <strata/comm/grid.hpp>
#include <strata/comm/self.hpp>
#include "catch.hpp"

using strata::grid_dims;
using strata::detail::grid_layout;

namespace {

std::string config_error_of(grid_dims d, int world) {
  try {
    grid_layout::make(world, d);
  } catch (const strata::config_error& e) {
    return e.what();
  }
  return "no config_error";
}

// An axis's groups must partition the world, each listed in coordinate order.
void check_partition(const grid_layout& g, std::vector<int> (grid_layout::*group)(int) const, int group_size) {
  std::set<std::vector<int>> groups;
  for (int r = 0; r < g.world_size(); ++r) {
    const auto members = (g.*group)(r);
    REQUIRE(static_cast<int>(members.size()) == group_size);
    REQUIRE(std::count(members.begin(), members.end(), r) == 1);
    groups.insert(members);
  }
  std::vector<int> all;
  for (const auto& m : groups) all.insert(all.end(), m.begin(), m.end());
  std::sort(all.begin(), all.end());
  REQUIRE(static_cast<int>(all.size()) == g.world_size());
  for (int r = 0; r < g.world_size(); ++r) REQUIRE(all[static_cast<std::size_t>(r)] == r);
}

}  // namespace

TEST_CASE("grid coordinates and groups for every factorisation of 8 ranks", "[grid]") {
  const int world = 8;
  int grids = 0;
  for (int tp : {1, 2, 4, 8})
    for (int pp : {1, 2, 4, 8}) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      for (int data : {0, dp}) {  // data given or derived
        CAPTURE(tp, pp, dp, data);
        ++grids;
        const auto g = grid_layout::make(world, {.tensor = tp, .pipeline = pp, .data = data});
        REQUIRE(g.tp == tp);
        REQUIRE(g.dp == dp);
        REQUIRE(g.pp == pp);
        for (int p = 0; p < pp; ++p)
          for (int d = 0; d < dp; ++d)
            for (int t = 0; t < tp; ++t) {
              const int rank = t + tp * (d + dp * p);
              CAPTURE(rank);
              const auto c = g.coords_of(rank);
              REQUIRE(c == grid_layout::coords{t, d, p});
              REQUIRE(g.rank_of(c) == rank);

              std::vector<int> tg, dg, pg, dtg;
              for (int x = 0; x < tp; ++x) tg.push_back(x + tp * (d + dp * p));
              for (int x = 0; x < dp; ++x) dg.push_back(t + tp * (x + dp * p));
              for (int x = 0; x < pp; ++x) pg.push_back(t + tp * (d + dp * x));
              for (int x = 0; x < dp; ++x)
                for (int y = 0; y < tp; ++y) dtg.push_back(y + tp * (x + dp * p));
              REQUIRE(g.tensor_group(rank) == tg);
              REQUIRE(g.data_group(rank) == dg);
              REQUIRE(g.pipeline_group(rank) == pg);
              REQUIRE(g.data_tensor_group(rank) == dtg);
              // A rank's position in its group is its coordinate on that axis.
              REQUIRE(tg[static_cast<std::size_t>(t)] == rank);
              REQUIRE(dg[static_cast<std::size_t>(d)] == rank);
              REQUIRE(pg[static_cast<std::size_t>(p)] == rank);
            }
        check_partition(g, &grid_layout::tensor_group, tp);
        check_partition(g, &grid_layout::data_group, dp);
        check_partition(g, &grid_layout::pipeline_group, pp);
        check_partition(g, &grid_layout::data_tensor_group, tp * dp);
      }
    }
  REQUIRE(grids == 20);  // 10 (tp, pp) pairs whose product divides 8, each with data 0 and explicit
}

TEST_CASE("a grid that does not fit the world is a config_error naming the numbers", "[grid]") {
  auto has = [](const std::string& msg, std::initializer_list<const char*> parts) {
    INFO(msg);
    for (const char* p : parts) {
      INFO(p);
      CHECK(msg.find(p) != std::string::npos);
    }
  };
  has(config_error_of({.tensor = 3}, 8), {"tensor=3", "does not divide the world size 8"});
  has(config_error_of({.tensor = 2, .pipeline = 3}, 8), {"tensor=2", "pipeline=3", "= 6", "world size 8"});
  has(config_error_of({.tensor = 2, .pipeline = 2, .data = 3}, 8), {"data=3", "= 12", "world size 8"});
  has(config_error_of({.tensor = 0}, 8), {"tensor=0"});
  has(config_error_of({.tensor = 1, .pipeline = -2}, 8), {"pipeline=-2"});
  has(config_error_of({.tensor = 1, .pipeline = 1, .data = -1}, 8), {"data=-1"});
  has(config_error_of({}, 0), {"world of 0 ranks"});

  const auto g = grid_layout::make(8, {.tensor = 2, .pipeline = 2});
  REQUIRE_THROWS_AS(g.coords_of(8), strata::config_error);
  REQUIRE_THROWS_AS(g.coords_of(-1), strata::config_error);
  REQUIRE_THROWS_AS(g.rank_of({2, 0, 0}), strata::config_error);
}

TEST_CASE("a grid over a single process", "[grid]") {
  strata::self_comm world;
  strata::grid g(world, {});
  REQUIRE(g.tp_size() == 1);
  REQUIRE(g.dp_size() == 1);
  REQUIRE(g.pp_size() == 1);
  REQUIRE(g.tp_rank() == 0);
  REQUIRE(g.tensor().size() == 1);
  REQUIRE(g.data_tensor().size() == 1);
  REQUIRE(g.pipeline().name() == "pipeline");
  REQUIRE(&g.world() == &world);
  REQUIRE_THROWS_AS(strata::grid(world, {.tensor = 2}), strata::config_error);
}
