// Assembles the whole model's weights from a grid: tensor-parallel slices into full
// tensors, pipeline stages' params concatenated in model order. Used for weights
// hashes and consolidated export; collective over the tensor and pipeline groups.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "../../core/error.hpp"
#include "../../model/param.hpp"

namespace strata::detail {

// Full tensors of this stage's params from each tensor-parallel rank's slice.
template <class Comm>
std::vector<float> gather_tensor_slices(Comm& tp, const std::vector<const param<float>*>& params,
                                        const std::vector<float>& local) {
  std::vector<float> out;
  std::size_t at = 0;
  for (const auto* p : params) {
    const std::size_t n = p->numel();
    const float* mine = local.data() + at;
    at += n;
    if (!p->sharded() || tp.size() == 1) {
      out.insert(out.end(), mine, mine + n);
      continue;
    }
    const auto dim = static_cast<std::size_t>(p->shard_dim);
    expects(p->shard_offset == static_cast<std::int64_t>(tp.rank()) * p->shape[dim], [&] {
      return cat(p->name, ": tensor-parallel slices must be equal and in rank order to be consolidated");
    });
    std::vector<float> all(n * static_cast<std::size_t>(tp.size()));
    tp.all_gather(std::span<const float>(mine, n), std::span<float>(all));
    const std::size_t base = out.size();
    out.resize(base + p->full_shape.numel());
    param<float> slice = *p;
    for (int r = 0; r < tp.size(); ++r) {
      slice.shard_offset = static_cast<std::int64_t>(r) * p->shape[dim];
      for (std::size_t j = 0; j < n; ++j) out[base + slice.global_index(j)] = all[static_cast<std::size_t>(r) * n + j];
    }
  }
  return out;
}

// Concatenates each pipeline stage's values in stage order, on every rank.
template <class Comm>
std::vector<float> concat_stages(Comm& pp, const std::vector<float>& mine) {
  if (pp.size() == 1) return mine;
  std::uint64_t n = mine.size();
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(pp.size()));
  pp.all_gather(std::span<const std::uint64_t>(&n, 1), std::span<std::uint64_t>(counts));
  const std::size_t most = *std::max_element(counts.begin(), counts.end());
  std::vector<float> padded(most), all(most * counts.size());
  std::copy(mine.begin(), mine.end(), padded.begin());
  pp.all_gather(std::span<const float>(padded), std::span<float>(all));
  std::vector<float> out;
  for (std::size_t s = 0; s < counts.size(); ++s)
    out.insert(out.end(), all.begin() + s * most, all.begin() + s * most + counts[s]);
  return out;
}

}  // namespace strata::detail
