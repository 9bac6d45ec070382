// cuda_run_table: a shard's decay runs (shard.hpp) uploaded to the device once, so that
// step_runs_cuda (cuda_optim.cuh) steps every run of a shard in a single launch.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "../core/error.hpp"
#include "../space/cuda.hpp"
#include "shard.hpp"

namespace strata {

namespace detail {

// Elements one block handles per visit of a run; runs are cut into tiles of this many
// so that a block finds its run by a binary search over first_tile, once per tile.
inline constexpr std::size_t cuda_run_tile = 4096;

// One decay run as the kernel reads it.
struct device_run {
  std::size_t offset = 0;  // relative to the shard
  std::size_t count = 0;
  std::size_t first_tile = 0;  // tiles of all runs before this one
  unsigned decay = 1;
  std::ptrdiff_t out_shift = 0;  // decay_run::out_shift
};

}  // namespace detail

class cuda_run_table {
 public:
  cuda_run_table() = default;
  // Checks the runs as step_runs does (sorted, disjoint, inside a shard of shard_n
  // elements) and copies them to the current device. Empty runs are dropped.
  cuda_run_table(std::span<const decay_run> runs, std::size_t shard_n) : shard_n_(shard_n) {
    std::vector<detail::device_run> table;
    table.reserve(runs.size());
    std::size_t end = 0;
    for (const decay_run& r : runs) {
      expects<config_error>(r.offset >= end && r.offset <= shard_n && r.count <= shard_n - r.offset, [&] {
        return strata::cat("cuda_run_table: decay run [", r.offset, ", ", r.offset + r.count,
                           ") is out of order or outside the shard of ", shard_n, " elements");
      });
      end = r.offset + r.count;
      if (r.count == 0) continue;
      table.push_back({r.offset, r.count, tiles_, r.decay ? 1u : 0u, r.out_shift});
      tiles_ += (r.count + detail::cuda_run_tile - 1) / detail::cuda_run_tile;
    }
    runs_ = buffer<detail::device_run, cuda>(table.size());
    if (!table.empty()) cuda::copy(runs_.data(), table.data(), runs_.bytes());
  }

  // The shard size the table was built for; a step checks its shard against it.
  std::size_t shard_size() const noexcept { return shard_n_; }
  std::size_t tiles() const noexcept { return tiles_; }
  int runs() const noexcept { return static_cast<int>(runs_.size()); }
  const detail::device_run* device_data() const noexcept { return runs_.data(); }

 private:
  buffer<detail::device_run, cuda> runs_;
  std::size_t shard_n_ = 0;
  std::size_t tiles_ = 0;
};

}  // namespace strata
