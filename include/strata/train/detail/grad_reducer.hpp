// The gradient buckets of a backward pass: a bucket's grads are zeroed before its last
// layer's backward in one of two rotating slots, reduce-scattered asynchronously after
// its first layer's, and the reduced piece is added into the fp32 grad shard when its slot
// is needed again or the micro-batch ends. Every stage runs these same calls, hence the
// same bits (DESIGN §4), and none keeps a full-model gradient buffer: the shard is where
// gradients accumulate, so a slot's grads are dead once reduced (docs/architecture.md,
// "Where each state lives"; decision 0038).
#pragma once
#include <cstddef>
#include <span>

#include "../../comm/request.hpp"
#include "../../model/param.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "stage_params.hpp"

namespace strata::detail {

template <class Types>
class grad_reducer {
  using compute_t = typename Types::compute_t;

 public:
  grad_reducer(const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev,
               const stage_params& params)
      : plan_(plan), state_(state), dev_(dev), params_(params) {}

  // Before bucket b's layers run backward: zeroes its gradient slot and binds the layers'
  // grads to it. `first_backward`: its piece replaces the grad shard's.
  void begin(std::size_t b, bool first_backward) {
    const int slot = static_cast<int>(b % 2);
    finish(slot);  // the slot's previous bucket must be reduced before reuse
    const auto& bk = plan_.buckets()[b];
    float* region = grad_region(b);
    dev_.eng->fill(region, bk.size, 0.0f);
    for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
      params_.for_each_in_layer(l, [&](param<float>& p, std::size_t off) { p.grad_ptr = region + (off - bk.offset); });
    pending_[slot].bucket = b;
    // A tied pair sharing one piece: the later of the two in backward (the lower index)
    // adds to what the earlier one put there.
    pending_[slot].first = first_backward && !(bk.tied_partner != bucket::npos && bk.tied_partner > b);
  }

  // After bucket b's first layer ran backward: its reduce-scatter starts.
  void launch(std::size_t b) {
    const int slot = static_cast<int>(b % 2);
    const auto& bk = plan_.buckets()[b];
    if (bk.size == 0) return;
    float* region = grad_region(b);
    pending_[slot].launched = true;
    if constexpr (Types::precision::is_mixed) {
      // 16-bit gradients on the wire, as on a GPU; accumulation stays fp32.
      compute_t* wire = state_.wire.data() + plan_.slot_offset(b);
      dev_.eng->template narrow<compute_t>(region, wire, bk.size);
      pending_[slot].req = dev_.dp->reduce_scatter_async(
          std::span<const compute_t>(wire, bk.size),
          std::span<compute_t>(state_.wire_out.data() + plan_.slot_piece_offset(b), bk.piece));
    } else {
      pending_[slot].req =
          dev_.dp->reduce_scatter_async(std::span<const float>(region, bk.size),
                                        std::span<float>(state_.reduced.data() + plan_.slot_piece_offset(b), bk.piece));
    }
  }

  // At the end of a backward pass: both slots, the later bucket in backward first (a
  // tied pair's second must add to what its first replaced).
  void finish_all() {
    const int higher = pending_[0].bucket > pending_[1].bucket ? 0 : 1;
    finish(higher);
    finish(1 - higher);
  }

  // Waits for the slot's reduce-scatter and adds its piece into the fp32 grad shard.
  // Whether one was launched is kept apart from the request: a reduce-scatter may complete
  // when called (self_comm, a single process without MPI), leaving no request pending.
  void finish(int slot) {
    auto& p = pending_[slot];
    if (!p.launched) return;
    p.launched = false;
    p.req.wait();
    const auto& bk = plan_.buckets()[p.bucket];
    float* acc = state_.grad_shard.data() + bk.shard_offset;
    if constexpr (Types::precision::is_mixed)
      dev_.eng->widen_accumulate(state_.wire_out.data() + plan_.slot_piece_offset(p.bucket), acc, bk.piece, p.first);
    else
      dev_.eng->accumulate(acc, state_.reduced.data() + plan_.slot_piece_offset(p.bucket), bk.piece, p.first);
  }

 private:
  // Gradient slot of bucket b: one of two rotating bucket buffers.
  float* grad_region(std::size_t b) { return state_.grads.data() + plan_.slot_offset(b); }

  struct pending_reduce {
    request req;
    std::size_t bucket = 0;
    bool first = true;
    bool launched = false;  // its reduce-scatter was started and its piece not yet added
  };

  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
  const stage_params& params_;
  pending_reduce pending_[2];
};

}  // namespace strata::detail
