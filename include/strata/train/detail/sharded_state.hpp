// The buffers one rank holds for a sharding stage (DESIGN §4), sized once from the
// bucket plan, and the runs of the flat shard that the optimizer steps.
#pragma once
#include <cstddef>
#include <vector>

#include "../../parallel/bucket_plan.hpp"
#include "../../space/host.hpp"
#include "../report.hpp"

namespace strata::detail {

// A run of master elements [begin, end) with one decay flag; its compute params start
// at out_begin in the params buffer (which is full for stages 0-2, a shard for stage 3).
struct update_run {
  std::size_t begin = 0, end = 0, out_begin = 0;
  bool decay = true;
};

template <class Compute>
struct sharded_state {
  host_buffer<float> params, live, grads, grad_shard, reduced, master, state0, state1;
  host_buffer<Compute> wire, wire_out;  // 16-bit gradient staging for mixed precision
  std::vector<update_run> runs;
  int rank = 0;

  void allocate(const bucket_plan& plan, int stage, int state_slots, bool mixed, int my_rank) {
    rank = my_rank;
    const std::size_t total = plan.total(), shard = plan.shard_size();
    const std::size_t two_buckets = 2 * plan.max_bucket(), two_pieces = 2 * plan.max_piece();
    params = host_buffer<float>(stage < 3 ? total : shard);
    if (stage == 3) live = host_buffer<float>(two_buckets);
    grads = host_buffer<float>(stage < 2 ? total : two_buckets);
    grad_shard = host_buffer<float>(shard);
    if (mixed) {
      wire = host_buffer<Compute>(two_buckets);
      wire_out = host_buffer<Compute>(two_pieces);
    } else {
      reduced = host_buffer<float>(two_pieces);
    }
    const std::size_t owned = stage == 0 ? total : shard;
    master = host_buffer<float>(owned);
    if (state_slots > 0) state0 = host_buffer<float>(owned);
    if (state_slots > 1) state1 = host_buffer<float>(owned);
    make_runs(plan, stage);
  }

  // Calls f(padded_offset, master_index, n) for the parts of the padded range [lo, hi)
  // whose master copy this rank holds.
  template <class F>
  void for_each_master_range(const bucket_plan& plan, int stage, std::size_t lo, std::size_t hi, F&& f) const {
    if (stage == 0) {
      if (hi > lo) f(lo, lo, hi - lo);
      return;
    }
    for (const auto& b : plan.buckets()) {
      const std::size_t pb = b.piece_begin(rank), pe = pb + b.piece;
      const std::size_t s = lo > pb ? lo : pb, e = hi < pe ? hi : pe;
      if (s < e) f(s, b.shard_offset + (s - pb), e - s);
    }
  }

  memory_report report(const bucket_plan&, int stage, bool offload, std::size_t activation_bytes) const {
    memory_report r;
    r.bytes["params"] = params.bytes() + live.bytes();
    r.bytes["grads"] = grads.bytes() + grad_shard.bytes();
    r.bytes["master"] = master.bytes();
    r.bytes["optimizer_states"] = state0.bytes() + state1.bytes();
    r.bytes["comm_buffers"] = reduced.bytes() + wire.bytes() + wire_out.bytes();
    r.bytes["activations"] = activation_bytes;
    for (auto& [k, v] : r.bytes) r.offloaded[k] = offload && (k == "master" || k == "optimizer_states");
    (void)stage;
    return r;
  }

 private:
  void make_runs(const bucket_plan& plan, int stage) {
    runs.clear();
    if (stage == 0) {
      for (const auto& d : plan.full_runs()) runs.push_back({d.offset, d.offset + d.count, d.offset, d.decay});
      return;
    }
    // Split the shard's decay runs at bucket pieces: stages 1-2 write each piece back
    // into its bucket's place in the full params buffer.
    for (const auto& d : plan.shard_runs(rank)) {
      for (const auto& b : plan.buckets()) {
        const std::size_t d_end = d.offset + d.count;
        const std::size_t s = d.offset > b.shard_offset ? d.offset : b.shard_offset;
        const std::size_t e = d_end < b.shard_offset + b.piece ? d_end : b.shard_offset + b.piece;
        if (s >= e) continue;
        const std::size_t out = stage == 3 ? s : b.piece_begin(rank) + (s - b.shard_offset);
        runs.push_back({s, e, out, d.decay});
      }
    }
  }
};

}  // namespace strata::detail
