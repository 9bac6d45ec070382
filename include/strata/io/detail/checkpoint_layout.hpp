// The saved layout of a checkpoint as load sees it: one entry per (tensor, pipeline)
// group, and the map from a full-tensor element to the file and position holding it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../core/error.hpp"
#include "../../core/shape.hpp"
#include "files.hpp"

namespace strata::detail {

inline std::vector<std::int64_t> dims_of(const shape& s) { return {s.dims.begin(), s.dims.begin() + s.rank}; }

inline shape shape_of(const std::vector<std::int64_t>& d) {
  expects<checkpoint_error>(d.size() <= shape::max_rank,
                            [&] { return cat("a shape of rank ", d.size(), " (at most 4)"); });
  shape s;
  for (auto v : d) s.dims[s.rank++] = v;
  return s;
}

// One param of one group: the slice [shard_offset, shard_offset + local[shard_dim]) of
// the full tensor along shard_dim (-1: the whole tensor), at `offset` in the padded plan.
struct saved_param {
  std::string name;
  shape local, full;
  int shard_dim = -1;
  std::int64_t shard_offset = 0;
  std::size_t offset = 0;
};

inline nlohmann::json to_json(const saved_param& p) {
  return {{"name", p.name},           {"shape", dims_of(p.local)},      {"full_shape", dims_of(p.full)},
          {"shard_dim", p.shard_dim}, {"shard_offset", p.shard_offset}, {"dtype", "F32"},
          {"offset", p.offset}};
}

// Row-major index in the full tensor of local element j of the slice.
inline std::size_t local_to_full(const saved_param& p, std::size_t j) {
  if (p.shard_dim < 0) return j;
  std::size_t idx = 0, sl = p.local.numel(), sf = p.full.numel();
  for (std::size_t d = 0; d < p.local.rank; ++d) {
    sl /= static_cast<std::size_t>(p.local[d] ? p.local[d] : 1);
    sf /= static_cast<std::size_t>(p.full[d] ? p.full[d] : 1);
    std::size_t c = sl ? j / sl : 0;
    j = sl ? j % sl : 0;
    if (static_cast<int>(d) == p.shard_dim) c += static_cast<std::size_t>(p.shard_offset);
    idx += c * sf;
  }
  return idx;
}

// Local index in slice p of full-tensor element g, or npos when p does not hold it.
inline constexpr std::size_t npos = static_cast<std::size_t>(-1);
inline std::size_t full_to_local(const saved_param& p, std::size_t g) {
  if (p.shard_dim < 0) return g;
  std::size_t idx = 0, sl = p.local.numel(), sf = p.full.numel();
  for (std::size_t d = 0; d < p.full.rank; ++d) {
    sl /= static_cast<std::size_t>(p.local[d] ? p.local[d] : 1);
    sf /= static_cast<std::size_t>(p.full[d] ? p.full[d] : 1);
    std::int64_t c = static_cast<std::int64_t>(sf ? g / sf : 0);
    g = sf ? g % sf : 0;
    if (static_cast<int>(d) == p.shard_dim) {
      c -= p.shard_offset;
      if (c < 0 || c >= p.local[d]) return npos;
    }
    idx += static_cast<std::size_t>(c) * sl;
  }
  return idx;
}

// Row-major: local index j of a slice along d is consecutive in the full tensor while it
// stays inside one block of local[d] x (dims after d) elements. These give how many
// elements from a position on map to consecutive positions, so load reads runs.
inline std::size_t inner_size(const saved_param& p) {
  std::size_t b = 1;
  for (std::size_t d = static_cast<std::size_t>(p.shard_dim) + 1; d < p.local.rank; ++d)
    b *= static_cast<std::size_t>(p.local[d]);
  return b;
}
// From local element j of p: elements consecutive in the full tensor.
inline std::size_t local_run(const saved_param& p, std::size_t j) {
  if (p.shard_dim < 0) return p.local.numel() - j;
  const std::size_t block = inner_size(p) * static_cast<std::size_t>(p.local[static_cast<std::size_t>(p.shard_dim)]);
  return block - j % block;
}
// From full-tensor element g, which slice p holds: elements p also holds, consecutively.
inline std::size_t full_run(const saved_param& p, std::size_t g) {
  if (p.shard_dim < 0) return p.full.numel() - g;
  const auto d = static_cast<std::size_t>(p.shard_dim);
  const std::size_t b = inner_size(p), end = static_cast<std::size_t>(p.shard_offset + p.local[d]) * b;
  return end - g % (b * static_cast<std::size_t>(p.full[d]));
}

// A (tensor rank, pipeline rank) group as saved: its params, bucket plan and files.
struct saved_group {
  struct bucket {
    std::size_t offset, size, piece, shard_offset;
    std::size_t replica_offset;  // in a replicated master (version 2: the padded offset)
  };
  struct file {
    std::string name, checksum;
    std::size_t bytes = 0;
    std::unique_ptr<posix_file> handle;
  };
  int tp = 0, pp = 0;
  bool replicated = false;
  std::size_t per_file = 0;
  std::vector<saved_param> params;
  std::vector<bucket> buckets;
  std::vector<file> files;  // by data-parallel rank; one when the master was replicated

  static saved_group parse(const nlohmann::json& g) {
    saved_group s;
    s.tp = g.at("tp_rank").get<int>();
    s.pp = g.at("pp_rank").get<int>();
    s.replicated = g.at("master").get<std::string>() == "replicated";
    s.per_file = g.at("elements_per_file").get<std::size_t>();
    for (const auto& p : g.at("params"))
      s.params.push_back({p.at("name").get<std::string>(), shape_of(p.at("shape").get<std::vector<std::int64_t>>()),
                          shape_of(p.at("full_shape").get<std::vector<std::int64_t>>()), p.at("shard_dim").get<int>(),
                          p.at("shard_offset").get<std::int64_t>(), p.at("offset").get<std::size_t>()});
    for (const auto& b : g.at("buckets")) {
      const auto offset = b.at("offset").get<std::size_t>();
      s.buckets.push_back({offset, b.at("size").get<std::size_t>(), b.at("piece").get<std::size_t>(),
                           b.at("shard_offset").get<std::size_t>(), b.value("replica_offset", offset)});
    }
    for (const auto& f : g.at("files")) {
      file x;
      x.name = f.at("name").get<std::string>();
      x.checksum = f.at("checksum").get<std::string>();
      x.bytes = f.at("bytes").get<std::size_t>();
      s.files.push_back(std::move(x));
    }
    return s;
  }

  // (file, position in each array of it, elements left before the bucket piece ends)
  // of padded offset `at`; throws naming `where` when the manifest is inconsistent.
  struct place {
    std::size_t file, pos, count;
  };
  place locate(std::size_t at, const std::string& where) const {
    auto it = std::upper_bound(buckets.begin(), buckets.end(), at,
                               [](std::size_t v, const bucket& b) { return v < b.offset; });
    if (it == buckets.begin() || at - (it - 1)->offset >= (it - 1)->size)
      throw checkpoint_error(cat(where, ": a param offset lies outside every bucket"));
    const auto& b = *(it - 1);
    const std::size_t within = at - b.offset;
    const place p = replicated ? place{0, b.replica_offset + within, b.size - within}
                               : place{within / b.piece, b.shard_offset + within % b.piece, b.piece - within % b.piece};
    if (p.file >= files.size() || p.pos + p.count > per_file)
      throw checkpoint_error(cat(where, ": a param range lies outside the saved shards"));
    return p;
  }
};

// Every saved slice of each param name: (group, index of the param in the group).
using saved_index = std::map<std::string, std::vector<std::pair<std::size_t, std::size_t>>>;

inline saved_index index_groups(const std::vector<saved_group>& groups) {
  saved_index idx;
  for (std::size_t g = 0; g < groups.size(); ++g)
    for (std::size_t i = 0; i < groups[g].params.size(); ++i) idx[groups[g].params[i].name].push_back({g, i});
  return idx;
}

// The whole saved model in order: names and full shapes of tensor rank 0's groups, by stage.
inline std::vector<const saved_param*> saved_model(const std::vector<saved_group>& groups) {
  std::vector<const saved_group*> order;
  for (const auto& g : groups)
    if (g.tp == 0) order.push_back(&g);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->pp < b->pp; });
  std::vector<const saved_param*> out;
  for (auto* g : order)
    for (const auto& p : g->params) out.push_back(&p);
  return out;
}

}  // namespace strata::detail
