// The bucket plan shared by every sharding stage: whole layers grouped in reverse order
// into buckets, each padded so it splits evenly over the data-parallel ranks. Gradients
// are reduce-scattered bucket by bucket, ZeRO-3 gathers bucket by bucket, and a rank's
// shard is its piece of every bucket, so all stages do the same arithmetic.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

#include "../core/error.hpp"
#include "../model/layout.hpp"
#include "../optim/shard.hpp"

namespace strata {

// Elements a bucket gathers before it is closed, unless the program asks for another size
// (trainer_options::bucket_elems, a config's reduce_bucket_size): 4 Mi, 16 MiB of fp32.
inline constexpr std::size_t default_bucket_elems = std::size_t{1} << 22;

// What of a bucket a rank's master holds: `count` elements from `padded` in the padded
// buffer, at `master` in the rank's master.
struct held_range {
  std::size_t padded, count, master;
};

struct bucket {
  std::size_t first_layer = 0, end_layer = 0;  // layers [first, end) in forward order
  std::size_t src_begin = 0, src_end = 0;      // the same elements in the flat layout
  std::size_t offset = 0;                      // start in the padded buffer
  std::size_t size = 0;                        // padded: a multiple of ranks * piece_alignment
  std::size_t piece = 0;                       // size / ranks: what each rank owns
  std::size_t shard_offset = 0;                // where this bucket's piece starts in a rank's shard
  std::size_t replica_offset = 0;              // where it starts in a replicated (ZeRO-0) master
  // A tied pair on one stage (an LM head tied to the embedding): the partner's index, and
  // on the copy's bucket `shares_piece`: its piece of the shard is the source's (one
  // master, one set of moments, one gradient shard for the one tensor), and so is its
  // place in a replicated master (replica_offset).
  std::size_t tied_partner = npos;
  bool shares_piece = false;

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t piece_begin(int rank) const { return offset + static_cast<std::size_t>(rank) * piece; }
  // A rank's piece at its shard_offset (ZeRO 1-3), or, in a replicated master (ZeRO-0),
  // the whole bucket at its replica_offset.
  held_range held(int rank, bool replicated) const {
    return replicated ? held_range{offset, size, replica_offset} : held_range{piece_begin(rank), piece, shard_offset};
  }
};

class bucket_plan {
 public:
  // Pieces stay 64-byte aligned so SIMD and DMA work on whole cache lines.
  static constexpr std::size_t piece_alignment = 16;

  bucket_plan() = default;
  // Plans the layers [layer_begin, layer_end) of the layout: a pipeline stage plans its own.
  bucket_plan(const flat_layout& layout, int ranks, std::size_t bucket_elems, std::size_t layer_begin = 0,
              std::size_t layer_end = static_cast<std::size_t>(-1))
      : ranks_(ranks) {
    expects<config_error>(ranks > 0, [&] { return strata::cat("bucket plan for ", ranks, " ranks: need at least 1"); });
    expects<config_error>(bucket_elems > 0, "bucket size must be at least 1 element");
    const auto& segs = layout.segments();
    layers_ = segs.size();
    layer_end = std::min(layer_end, segs.size());
    expects<config_error>(layer_begin < layer_end || segs.empty(), [&] {
      return strata::cat("bucket plan for layers [", layer_begin, ", ", layer_end, ") of ", segs.size(), ": empty");
    });
    // A layer holding one of two tied params is a bucket alone: the two tensors' buckets
    // then have one size, and each rank's piece of both covers the same elements, so
    // their gradients can be summed piece by piece (see train/detail/tied_params.hpp).
    const std::vector<bool> alone = tied_layers(layout, segs.size());
    // Walk layers from the last: backward produces their gradients first.
    std::vector<bucket> reversed;
    std::size_t end = layer_end;
    while (end > layer_begin) {
      std::size_t first = end, elems = 0;
      if (alone[end - 1]) --first;
      while (first > layer_begin && !alone[first - 1] && !(first < end && alone[first]) &&
             (elems == 0 || elems + segs[first - 1].size <= bucket_elems)) {
        --first;
        elems += segs[first].size;
        if (elems >= bucket_elems) break;
      }
      bucket b;
      b.first_layer = first;
      b.end_layer = end;
      b.src_begin = segs[first].offset;
      b.src_end = segs[end - 1].offset + segs[end - 1].size;
      reversed.push_back(b);
      end = first;
    }
    buckets_.assign(reversed.rbegin(), reversed.rend());
    const std::size_t quantum = static_cast<std::size_t>(ranks) * piece_alignment;
    std::size_t offset = 0, shard = 0;
    layer_bucket_.assign(layers_, 0);
    for (std::size_t i = 0; i < buckets_.size(); ++i) {
      auto& b = buckets_[i];
      b.offset = offset;
      b.size = (b.src_end - b.src_begin + quantum - 1) / quantum * quantum;
      b.piece = b.size / static_cast<std::size_t>(ranks);
      b.shard_offset = shard;
      b.replica_offset = offset;
      offset += b.size;
      shard += b.piece;
      max_bucket_ = std::max(max_bucket_, b.size);
      slot_size_[i % 2] = std::max(slot_size_[i % 2], b.size);
      for (std::size_t l = b.first_layer; l < b.end_layer; ++l) layer_bucket_[l] = i;
    }
    total_ = replica_total_ = offset;
    shard_size_ = shard;
    share_tied_pieces(layout, layer_begin, layer_end);
    for (const auto& p : layout.params())
      if (p.layer_index >= layer_begin && p.layer_index < layer_end)
        params_.push_back({to_padded(p.offset), p.numel, p.decay});
  }

  int ranks() const noexcept { return ranks_; }
  const std::vector<bucket>& buckets() const noexcept { return buckets_; }
  std::size_t total() const noexcept { return total_; }
  // A replicated master's elements: the padded buffer less the buckets that share their
  // partner's piece (total() without ties).
  std::size_t replica_total() const noexcept { return replica_total_; }
  std::size_t shard_size() const noexcept { return shard_size_; }
  std::size_t max_bucket() const noexcept { return max_bucket_; }
  std::size_t max_piece() const noexcept { return ranks_ ? max_bucket_ / static_cast<std::size_t>(ranks_) : 0; }
  std::size_t bucket_of_layer(std::size_t layer) const { return layer_bucket_.at(layer); }

  // Buckets in flight (gathered params, gradient slots, their wire) take turns in two
  // slots by parity: bucket b uses slot b % 2, sized for the largest bucket of its
  // parity. Two slots of the largest bucket would cost a second copy of it wherever one
  // layer dominates (Qwen2.5-0.5B's embedding and tied head are both even: 1.2 GB a rank).
  std::size_t slot_elems() const noexcept { return slot_size_[0] + slot_size_[1]; }
  std::size_t slot_offset(std::size_t b) const noexcept { return b % 2 ? slot_size_[0] : 0; }
  std::size_t slot_piece_elems() const noexcept { return ranks_ ? slot_elems() / static_cast<std::size_t>(ranks_) : 0; }
  std::size_t slot_piece_offset(std::size_t b) const noexcept {
    return ranks_ ? slot_offset(b) / static_cast<std::size_t>(ranks_) : 0;
  }

  // Offset in the padded buffer of an offset of the flat layout.
  std::size_t to_padded(std::size_t flat_offset) const {
    for (const auto& b : buckets_)
      if (flat_offset >= b.src_begin && flat_offset < b.src_end) return b.offset + (flat_offset - b.src_begin);
    // One past the end of the last bucket (an empty param at the end).
    return buckets_.empty() ? 0 : buckets_.back().offset + (flat_offset - buckets_.back().src_begin);
  }

  // Decay runs over what a rank's master holds (bucket::held; master coordinates): its
  // shard, or a replicated master. Padding joins a neighbouring run: it is zero and stays
  // zero under every update, whatever its decay flag. A bucket that shares its partner's
  // piece adds none.
  std::vector<decay_run> master_runs(int rank, bool replicated) const {
    std::vector<decay_run> runs;
    for (const auto& b : buckets_) {
      if (b.shares_piece) continue;
      const held_range h = b.held(rank, replicated);
      append_runs(h.padded, h.padded + h.count, h.master, runs);
    }
    return runs;
  }
  std::vector<decay_run> shard_runs(int rank) const { return master_runs(rank, false); }

 private:
  // Per layer: whether it holds a param tied to another, or one another is tied to.
  static std::vector<bool> tied_layers(const flat_layout& layout, std::size_t layers) {
    std::vector<bool> alone(layers, false);
    for (const auto& p : layout.params()) {
      if (p.tied_to.empty()) continue;
      alone[p.layer_index] = true;
      for (const auto& q : layout.params())
        if (q.name == p.tied_to) alone[q.layer_index] = true;
    }
    return alone;
  }

  // Where both params of a tie are on this stage, the copy's bucket takes the source's
  // shard piece (both are buckets alone of one padded size, so the pieces line up), and
  // the buckets after it move down by its piece. find_ties (train/detail/tied_params.hpp)
  // checks the pair and says what is wrong; a pair it would refuse is not shared here.
  void share_tied_pieces(const flat_layout& layout, std::size_t layer_begin, std::size_t layer_end) {
    const auto& ps = layout.params();
    const auto inside = [&](std::size_t layer) { return layer >= layer_begin && layer < layer_end; };
    bool any = false;
    for (const auto& p : ps) {
      if (p.tied_to.empty() || !inside(p.layer_index)) continue;
      for (const auto& q : ps) {
        if (q.name != p.tied_to || !inside(q.layer_index) || !q.tied_to.empty() || q.numel != p.numel) continue;
        const std::size_t c = layer_bucket_[p.layer_index], s = layer_bucket_[q.layer_index];
        if (c == s || buckets_[c].size != buckets_[s].size || buckets_[c].shares_piece ||
            buckets_[s].tied_partner != bucket::npos)
          continue;
        buckets_[c].tied_partner = s;
        buckets_[s].tied_partner = c;
        buckets_[c].shares_piece = true;
        any = true;
      }
    }
    if (!any) return;
    std::size_t shard = 0, replica = 0;
    for (auto& b : buckets_) {
      if (b.shares_piece) continue;
      b.shard_offset = shard;
      b.replica_offset = replica;
      shard += b.piece;
      replica += b.size;
    }
    for (auto& b : buckets_)
      if (b.shares_piece) {
        b.shard_offset = buckets_[b.tied_partner].shard_offset;
        b.replica_offset = buckets_[b.tied_partner].replica_offset;
      }
    shard_size_ = shard;
    replica_total_ = replica;
  }

  struct padded_param {
    std::size_t offset, numel;
    bool decay;
  };
  // Appends the runs of [lo, hi) of the padded buffer, shifted so lo maps to `base`.
  void append_runs(std::size_t lo, std::size_t hi, std::size_t base, std::vector<decay_run>& runs) const {
    auto push = [&](std::size_t b, std::size_t e, bool decay) { add_decay_run(runs, b - lo + base, e - b, decay); };
    auto last_flag = [&](bool fallback) { return runs.empty() ? fallback : runs.back().decay; };
    std::size_t cursor = lo;
    for (const auto& p : params_) {
      const std::size_t b = std::max(lo, p.offset), e = std::min(hi, p.offset + p.numel);
      if (b >= e) continue;
      if (b > cursor) push(cursor, b, last_flag(p.decay));
      push(b, e, p.decay);
      cursor = e;
    }
    if (cursor < hi) push(cursor, hi, last_flag(true));
  }

  int ranks_ = 1;
  std::size_t layers_ = 0, total_ = 0, replica_total_ = 0, shard_size_ = 0, max_bucket_ = 0;
  std::size_t slot_size_[2] = {0, 0};
  std::vector<bucket> buckets_;
  std::vector<std::size_t> layer_bucket_;
  std::vector<padded_param> params_;
};

}  // namespace strata
