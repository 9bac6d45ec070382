// Tied params (an LM head that is the input embedding): the trainer keeps both as params
// of their own layers, starts them from one tensor and, before every step, gives both the
// sum of their gradients, so they stay one tensor bit for bit (Megatron's way; at
// pipeline > 1 the sum crosses the stages that hold them).
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "../../comm/reduce_op.hpp"
#include "../../core/error.hpp"
#include "../../model/layout.hpp"
#include "../../model/param.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../../parallel/pipeline.hpp"
#include "stage_params.hpp"

namespace strata::detail {

// A param tied to another, as layout indices: `copy` names `source` in its tied_to.
struct tied_pair {
  std::size_t copy = 0, source = 0;
};

// The ties of a model, checked: the named param exists, is not itself tied, and has the
// same shape and tensor-parallel slice; each is the only param with elements in its layer
// (the bucket plan makes such a layer a bucket alone, so the pieces line up).
inline std::vector<tied_pair> find_ties(const flat_layout& layout, const std::vector<param<float>*>& params) {
  std::vector<tied_pair> ties;
  const auto& slots = layout.params();
  const auto alone_in_layer = [&](std::size_t i) {
    for (const auto& q : slots)
      if (q.layer_index == slots[i].layer_index && q.numel != 0 && q.name != slots[i].name) return false;
    return true;
  };
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const auto& p = slots[i];
    if (p.tied_to.empty()) continue;
    std::size_t j = slots.size();
    for (std::size_t k = 0; k < slots.size(); ++k)
      if (slots[k].name == p.tied_to) j = k;
    expects<config_error>(j < slots.size(), [&] {
      return cat("strata::trainer: ", p.name, " is tied to ", p.tied_to, ", which the model has no param of");
    });
    const param<float>& a = *params[i];
    const param<float>& b = *params[j];
    expects<config_error>(j != i && slots[j].tied_to.empty(), [&] {
      return cat("strata::trainer: ", p.name, " is tied to ", p.tied_to,
                 ", which is tied itself; tie every copy to the one source");
    });
    expects<config_error>(a.shape == b.shape && a.shard_dim == b.shard_dim && a.shard_offset == b.shard_offset &&
                              (!a.sharded() || a.full_shape == b.full_shape),
                          [&] {
                            return cat("strata::trainer: ", p.name, " ", a.shape, " is tied to ", p.tied_to, " ",
                                       b.shape,
                                       "; tied params must be the same tensor, sliced alike over tensor ranks");
                          });
    expects<config_error>(alone_in_layer(i) && alone_in_layer(j), [&] {
      return cat("strata::trainer: ", p.name, " is tied to ", p.tied_to,
                 "; each must be the only param of its layer (give the layer no other weights)");
    });
    ties.push_back({i, j});
  }
  return ties;
}

template <class Types>
class tied_params {
 public:
  tied_params(typename Types::grid_t& grid, const flat_layout& layout, const stage_params& params,
              const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev)
      : grid_(grid), layout_(layout), params_(params), plan_(plan), state_(state), dev_(dev) {}

  // Collective over the pipeline group when a tie spans stages (every rank of it splits
  // off the pair of stages that hold the two).
  void setup(const std::vector<std::size_t>& cuts) {
    ties_ = find_ties(layout_, params_.all);
    source_.resize(layout_.params().size());
    for (std::size_t i = 0; i < source_.size(); ++i) source_[i] = i;
    for (const auto& t : ties_) source_[t.copy] = t.source;
    std::vector<std::size_t> sizes;
    for (const auto& seg : layout_.segments()) sizes.push_back(seg.used);
    const int stages = grid_.pp_size(), me = grid_.pp_rank();
    const auto stage_of = [&](std::size_t layer) {
      for (int s = 0; s < stages; ++s) {
        const auto [first, end] = stage_layer_range(sizes, cuts, stages, s);
        if (layer >= first && layer < end) return s;
      }
      return stages - 1;
    };
    for (const auto& t : ties_) {
      link l;
      const int sc = stage_of(layout_.params()[t.copy].layer_index);
      const int ss = stage_of(layout_.params()[t.source].layer_index);
      l.copy = piece_of(t.copy, sc == me);
      l.source = piece_of(t.source, ss == me);
      if (sc != ss) {
        const bool member = me == sc || me == ss;
        auto pair = grid_.pipeline().split(member ? 0 : 1, me);
        if (member) {  // the gradients are the space's: on a GPU a device communicator of the pair
          if constexpr (Types::on_host)
            l.across.emplace(std::move(pair));
          else
            l.across.emplace(dev_.eng->make_comm(pair, "tied"));
        }
      }
      links_.push_back(std::move(l));
    }
  }

  bool any() const noexcept { return !ties_.empty(); }
  const std::vector<tied_pair>& pairs() const noexcept { return ties_; }

  // The layout index whose values and init a param takes: its source when tied.
  // (Asked per element while weights are filled: a table, not a search.)
  std::size_t value_source(std::size_t i) const { return source_[i]; }

  // The copies on this stage as padded ranges: left out of the global norm, which counts
  // the one tensor once (its source carries the same gradient).
  std::vector<std::pair<std::size_t, std::size_t>> copy_ranges() const {
    std::vector<std::pair<std::size_t, std::size_t>> r;
    for (std::size_t k = 0; k < ties_.size(); ++k)
      if (links_[k].copy.here) {
        const std::size_t i = ties_[k].copy;
        r.push_back({params_.offset[i], params_.offset[i] + layout_.params()[i].numel});
      }
    return r;
  }

  // Both pieces of every tie get their sum: the reduced gradients of one tensor. a + b
  // is the same float as b + a, so the two stay equal.
  void sum_grads() {
    float* g = state_.grad_shard.data();
    for (auto& l : links_) {
      if (l.copy.here && l.source.here && l.copy.begin == l.source.begin) continue;  // one piece (bucket_plan)
      if (l.copy.here && l.source.here) {
        dev_.eng->accumulate(g + l.source.begin, g + l.copy.begin, l.source.size, false);
        dev_.eng->copy(g + l.copy.begin, g + l.source.begin, l.source.size);
      } else if (l.across) {
        const piece& p = l.copy.here ? l.copy : l.source;
        l.across->all_reduce(std::span<float>(g + p.begin, p.size), reduce_op::sum);
      }
    }
  }

 private:
  // A param's piece of this rank's grad shard: its layer is its bucket.
  struct piece {
    bool here = false;
    std::size_t begin = 0, size = 0;
  };
  struct link {
    piece copy, source;
    std::optional<typename Types::dev_comm_t> across;  // the two stages' ranks, when they differ
  };

  piece piece_of(std::size_t i, bool on_this_stage) const {
    piece p;
    if (!on_this_stage) return p;
    const auto& bk = plan_.buckets()[plan_.bucket_of_layer(layout_.params()[i].layer_index)];
    p.here = true;
    p.begin = bk.shard_offset;
    p.size = bk.piece;
    return p;
  }

  typename Types::grid_t& grid_;
  const flat_layout& layout_;
  const stage_params& params_;
  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
  std::vector<tied_pair> ties_;
  std::vector<std::size_t> source_;  // per param: itself, or the source it is tied to
  std::vector<link> links_;
};

}  // namespace strata::detail
