// Params that other data-parallel ranks hold: ZeRO-3 all-gathers a bucket into one of two
// live slots before its layers run, prefetching the next bucket in the direction of
// travel; ZeRO-1/2 all-gather every bucket's updated piece after the optimizer step. A
// param shard offloaded to host memory goes up piece by piece inside its gather.
#pragma once
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "../../comm/request.hpp"
#include "../../model/param.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "stage_params.hpp"

namespace strata::detail {

template <class Types>
class param_gathers {
  static constexpr int stage = Types::stage;
  using param_t = typename Types::param_t;

 public:
  param_gathers(const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev,
                const stage_params& params, typename Types::comm_t& dp)
      : plan_(plan), state_(state), dev_(dev), params_(params), dp_(dp) {}

  // Stages 0-2 keep the full params: bound once.
  void bind_static() {
    if constexpr (stage < 3)
      for (std::size_t l = params_.first_layer; l < params_.end_layer; ++l)
        params_.for_each_in_layer(l, [&](param<float>& p, std::size_t off) { bind(p, state_.params.data() + off); });
  }
  void reserve() { gather_reqs_.reserve(plan_.buckets().size()); }

  // ZeRO-3: makes bucket b's params live in its slot, and prefetches the next bucket in
  // the direction of travel so its all-gather overlaps this bucket's compute.
  void ensure_live(std::size_t b, bool forward) {
    auto& slot = live_[b % 2];
    if (slot.bucket != b || !slot.valid) start_gather(b);
    // A gather may complete at once (self_comm, a single process without MPI: no request
    // is pending), so binding follows the gather, not the wait.
    if (slot.req.pending()) slot.req.wait();
    if (!slot.bound) {
      bind_live(b);
      slot.bound = true;
    }
    const auto& buckets = plan_.buckets();
    const bool has_next = forward ? b + 1 < buckets.size() && buckets[b + 1].first_layer < params_.end_layer
                                  : b > 0 && buckets[b - 1].end_layer > params_.first_layer;
    if (has_next) {
      const std::size_t next = forward ? b + 1 : b - 1;
      if (live_[next % 2].bucket != next || !live_[next % 2].valid) start_gather(next);
    }
  }

  // ZeRO-3: the shard's params changed, so what the live slots hold is stale.
  void invalidate() {
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
  }

  // ZeRO-1/2: every rank holds the full params again, from each rank's updated piece.
  void gather_updated() {
    if constexpr (stage == 1 || stage == 2) {
      gather_reqs_.clear();
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        param_t* region = state_.params.data() + bk.offset;
        gather_reqs_.push_back(dev_.dp->all_gather_async(
            std::span<const param_t>(region + bk.piece * static_cast<std::size_t>(dp_.rank()), bk.piece),
            std::span<param_t>(region, bk.size)));
      }
      for (auto& r : gather_reqs_) r.wait();
      gather_reqs_.clear();
    }
  }

 private:
  void start_gather(std::size_t b) {
    auto& slot = live_[b % 2];
    if (slot.req.pending()) slot.req.wait();
    const auto& bk = plan_.buckets()[b];
    slot.bucket = b;
    slot.valid = true;
    slot.bound = false;
    if (bk.size == 0) return;
    const std::span<const param_t> piece(state_.param_data() + bk.shard_offset, bk.piece);
    const std::span<param_t> out(state_.live.data() + plan_.slot_offset(b), bk.size);
    if constexpr (!Types::on_host) {
      // Copied into this rank's block of the slot on the communication stream, so the
      // upload overlaps compute as the gather does, then gathered in place.
      if (state_.params_offloaded()) {
        slot.req = dev_.dp->all_gather_from_host_async(piece, out);
        return;
      }
    }
    slot.req = dev_.dp->all_gather_async(piece, out);
  }

  void bind_live(std::size_t b) {
    const auto& bk = plan_.buckets()[b];
    param_t* base = state_.live.data() + plan_.slot_offset(b);
    for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
      params_.for_each_in_layer(l, [&](param<float>& p, std::size_t off) { bind(p, base + (off - bk.offset)); });
  }

  // A param's data_ptr points at its compute values, of the layers' weight type
  // (nn::weights_of reads them back as such; 16 bits on a GPU in mixed precision).
  static void bind(param<float>& p, param_t* values) noexcept {
    if constexpr (std::is_same_v<param_t, float>)
      p.data_ptr = values;
    else
      p.data_ptr = reinterpret_cast<float*>(values);
  }

  struct live_slot {
    request req;
    std::size_t bucket = 0;
    bool valid = false;
    bool bound = false;  // the bucket's params point into the slot
  };

  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
  const stage_params& params_;
  typename Types::comm_t& dp_;
  live_slot live_[2];
  std::vector<request> gather_reqs_;
};

}  // namespace strata::detail
