// The arithmetic of the (tensor, data, pipeline) process grid in Megatron order: tensor
// fastest, then data, then pipeline. No communication, so it is testable for any size.
#pragma once
#include <vector>

#include "../../core/error.hpp"
#include "../grid_dims.hpp"

namespace strata::detail {

struct grid_layout {
  int tp = 1, dp = 1, pp = 1;

  struct coords {
    int tp = 0, dp = 0, pp = 0;
    friend bool operator==(const coords&, const coords&) = default;
  };

  static grid_layout make(int world_size, grid_dims d) {
    expects<config_error>(world_size > 0, cat("grid over a world of ", world_size, " ranks: must be positive"));
    expects<config_error>(d.tensor > 0 && d.pipeline > 0 && d.data >= 0,
                          cat("grid tensor=", d.tensor, " pipeline=", d.pipeline, " data=", d.data,
                              ": tensor and pipeline must be >= 1, data >= 1 (or 0 for world / (tensor * pipeline))"));
    const long tp_pp = static_cast<long>(d.tensor) * d.pipeline;
    if (d.data == 0) {
      expects<config_error>(world_size % tp_pp == 0, cat("grid tensor=", d.tensor, " x pipeline=", d.pipeline, " = ",
                                                         tp_pp, " does not divide the world size ", world_size));
      return {d.tensor, static_cast<int>(world_size / tp_pp), d.pipeline};
    }
    expects<config_error>(tp_pp * d.data == world_size,
                          cat("grid tensor=", d.tensor, " x data=", d.data, " x pipeline=", d.pipeline, " = ",
                              tp_pp * d.data, " is not the world size ", world_size));
    return {d.tensor, d.data, d.pipeline};
  }

  int world_size() const { return tp * dp * pp; }

  coords coords_of(int rank) const {
    check(rank);
    return {rank % tp, (rank / tp) % dp, rank / (tp * dp)};
  }
  int rank_of(coords c) const {
    expects<config_error>(c.tp >= 0 && c.tp < tp && c.dp >= 0 && c.dp < dp && c.pp >= 0 && c.pp < pp,
                          cat("grid coordinates (tp=", c.tp, ", dp=", c.dp, ", pp=", c.pp,
                              ") outside a grid of tp=", tp, " dp=", dp, " pp=", pp));
    return c.tp + tp * (c.dp + dp * c.pp);
  }

  // The ranks that share `rank`'s group on an axis, in order of their coordinate on it.
  std::vector<int> tensor_group(int rank) const {
    auto c = coords_of(rank);
    std::vector<int> g;
    for (c.tp = 0; c.tp < tp; ++c.tp) g.push_back(rank_of(c));
    return g;
  }
  std::vector<int> data_group(int rank) const {
    auto c = coords_of(rank);
    std::vector<int> g;
    for (c.dp = 0; c.dp < dp; ++c.dp) g.push_back(rank_of(c));
    return g;
  }
  std::vector<int> pipeline_group(int rank) const {
    auto c = coords_of(rank);
    std::vector<int> g;
    for (c.pp = 0; c.pp < pp; ++c.pp) g.push_back(rank_of(c));
    return g;
  }
  // Data x tensor (what ZeRO shards over when tensor parallelism is on), tensor fastest.
  std::vector<int> data_tensor_group(int rank) const {
    auto c = coords_of(rank);
    std::vector<int> g;
    for (c.dp = 0; c.dp < dp; ++c.dp)
      for (c.tp = 0; c.tp < tp; ++c.tp) g.push_back(rank_of(c));
    return g;
  }

 private:
  void check(int rank) const {
    expects<config_error>(rank >= 0 && rank < world_size(), cat("rank ", rank, " outside a grid of ", world_size(),
                                                                " ranks (tp=", tp, " dp=", dp, " pp=", pp, ")"));
  }
};

}  // namespace strata::detail
