// strata-ranks: 2 4
// strata-gloo-ranks: 4
// A real process grid over mpi_comm: each axis's sub-communicator has the layout's size and
// coordinate, and a reduction over an axis sums exactly the ranks of that axis's group.
#include <cstdint>
#include <numeric>
#include <vector>

#include <strata/comm/environment.hpp>
#include <strata/comm/grid.hpp>
#include "catch.hpp"

namespace {

std::int64_t sum_of(const std::vector<int>& ranks) {
  return std::accumulate(ranks.begin(), ranks.end(), std::int64_t{0});
}

void check_axis(strata::world_comm& axis, const std::vector<int>& group, int me, int coordinate, const char* name) {
  INFO("axis " << name);
  REQUIRE(axis.size() == static_cast<int>(group.size()));
  REQUIRE(axis.rank() == coordinate);
  REQUIRE(axis.name() == name);
  std::vector<std::int64_t> v{me};
  axis.all_reduce(std::span(v));
  REQUIRE(v[0] == sum_of(group));
  // Gathering world ranks lists the group in coordinate order.
  std::vector<std::int32_t> mine{me}, all(group.size());
  axis.all_gather(std::span<const std::int32_t>(mine), std::span(all));
  REQUIRE(std::vector<int>(all.begin(), all.end()) == group);
}

}  // namespace

TEST_CASE("grid sub-communicators match the layout on every axis", "[grid]") {
  strata::environment env;
  auto& w = env.world();
  const int me = w.rank();
  // At 4 ranks: tp2 x dp2, pp2 x dp2 and tp2 x pp2.
  for (strata::grid_dims dims : {strata::grid_dims{.tensor = 2}, strata::grid_dims{.pipeline = 2},
                                 strata::grid_dims{.tensor = 2, .pipeline = 2}}) {
    CAPTURE(dims.tensor, dims.pipeline, w.size());
    if (w.size() % (dims.tensor * dims.pipeline) != 0) {
      REQUIRE_THROWS_AS(strata::grid(w, dims), strata::config_error);
      continue;
    }
    strata::grid g(w, dims);
    const auto& layout = g.layout();
    const auto c = layout.coords_of(me);
    REQUIRE(layout.world_size() == w.size());
    REQUIRE(g.tp_size() * g.dp_size() * g.pp_size() == w.size());
    REQUIRE((g.tp_rank() == c.tp && g.dp_rank() == c.dp && g.pp_rank() == c.pp));
    REQUIRE(me == c.tp + g.tp_size() * (c.dp + g.dp_size() * c.pp));
    check_axis(g.tensor(), layout.tensor_group(me), me, c.tp, "tensor");
    check_axis(g.data(), layout.data_group(me), me, c.dp, "data");
    check_axis(g.pipeline(), layout.pipeline_group(me), me, c.pp, "pipeline");
    check_axis(g.data_tensor(), layout.data_tensor_group(me), me, c.tp + g.tp_size() * c.dp, "data_tensor");

    // Each axis has its own lane: reductions on two axes are in flight at once.
    std::vector<double> t{1.0}, d{static_cast<double>(me)};
    auto rt = g.tensor().all_reduce_async(std::span(t));
    auto rd = g.data().all_reduce_async(std::span(d));
    rd.wait();
    rt.wait();
    REQUIRE(t[0] == g.tp_size());
    REQUIRE(d[0] == static_cast<double>(sum_of(layout.data_group(me))));
  }
}
