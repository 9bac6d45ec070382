// The optimizer step of this rank's shard and what follows it: the compute params are the
// master rounded to the compute precision, gathered again where other ranks updated them.
// Offloaded state steps on the host run by run while each run's params go back.
#pragma once
#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "../../optim/shard.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "param_gathers.hpp"

namespace strata::detail {

// Compute params = master rounded to the compute precision (after a step that did not
// write them itself, with_runs false: the tied copies' mirrors only); then stages 1-2
// all-gather the pieces so every rank holds the full params again. Not a member of
// shard_update: what only reads the optimizer's result is compiled once for every optimizer.
template <class Types>
void refresh_compute_params(typename Types::state_t& state, typename Types::dev_t& dev, param_gathers<Types>& gathers,
                            bool with_runs = true) {
  if constexpr (Types::split) dev.eng->synchronize();  // host_params may still be on its way
  if (with_runs)
    for (const auto& r : state.runs) state.template refresh_run<typename Types::compute_t>(*dev.eng, dev.host_eng, r);
  for (const auto& r : state.mirrors) state.template refresh_mirror<typename Types::compute_t>(*dev.eng, r);
  gathers.gather_updated();
}

template <class Types, class Optimizer>
class shard_update {
  static constexpr int stage = Types::stage;
  using compute_t = typename Types::compute_t;

 public:
  shard_update(Optimizer opt, const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev,
               param_gathers<Types>& gathers)
      : opt_(opt), plan_(plan), state_(state), dev_(dev), gathers_(gathers) {}

  // After the state is allocated: ZeRO-0 steps a bucket at a time, each bucket's runs a
  // step group of the engine's (numbered from 1), relative to its place in the master
  // (their params still go to the bucket's place in the full buffer).
  void prepare() {
    if constexpr (by_bucket()) {
      for (std::size_t b = 0; b < plan_.buckets().size(); ++b) {
        const auto& bk = plan_.buckets()[b];
        if (bk.shares_piece) continue;  // its partner's runs step the one tensor
        const std::size_t at = bk.replica_offset;
        std::vector<update_run> runs;
        for (const auto& r : state_.runs) {
          const std::size_t s = std::max(r.begin, at), e = std::min(r.end, at + bk.size);
          if (s < e) runs.push_back({s - at, e - at, r.out_begin + (s - r.begin) - at, r.decay});
        }
        dev_.eng->prepare_step(runs, bk.size, b + 1);
      }
    }
  }

  // Steps master and moments with the reduced grad shard (scaled by grad_scale), writing
  // the compute params in the same pass where they are the compute type (else rounding
  // them after), then zeroes the grad shard for the next step.
  void apply(float lr, float grad_scale, long opt_step) {
    constexpr bool writes = Types::state_t::step_writes_params && writes_param_out<Optimizer>;
    shard_args<std::conditional_t<writes, typename Types::param_t, float>, float> a{};
    if constexpr (writes) a.param_out = state_.out_param();
    a.master = state_.master.data();
    a.grad = state_.grad_shard.data();
    a.state0 = Optimizer::state_slots > 0 ? state_.state0.data() : nullptr;
    a.state1 = Optimizer::state_slots > 1 ? state_.state1.data() : nullptr;
    a.n = state_.master.size();
    if constexpr (by_bucket()) {
      // Replicated: each bucket's reduced pieces are all-gathered into a gradient slot
      // (free once backward is over), then every rank steps the bucket. A device gather
      // follows the compute stream's earlier work, so the step that last read the slot.
      for (std::size_t b = 0; b < plan_.buckets().size(); ++b) {
        const auto& bk = plan_.buckets()[b];
        if (bk.size == 0 || bk.shares_piece) continue;
        float* slot = state_.grads.data() + plan_.slot_offset(b);
        dev_.dp->all_gather(std::span<const float>(state_.grad_shard.data() + bk.shard_offset, bk.piece),
                            std::span<float>(slot, bk.size));
        auto ab = a.slice(bk.replica_offset, bk.size);
        ab.grad = slot;
        dev_.eng->step(opt_, ab, lr, grad_scale, opt_step, b + 1);
      }
      refresh_compute_params<Types>(state_, dev_, gathers_, !writes);
    } else if constexpr (Types::split) {
      // Offloaded: the grad shard comes to the host, the host steps run by run, and each
      // run's new params go back to the device while the host steps the next one.
      dev_.eng->download(state_.host_grads.data(), a.grad, a.n);
      a.grad = state_.host_grads.data();
      for (const auto& r : state_.runs) {
        dev_.host_eng.step_run(opt_, a, state_.written_run(r), lr, grad_scale, opt_step);
        if constexpr (writes)
          state_.upload_run(*dev_.eng, r);
        else
          state_.template refresh_run<compute_t>(*dev_.eng, dev_.host_eng, r);
      }
      for (const auto& r : state_.mirrors) state_.template refresh_mirror<compute_t>(*dev_.eng, r);
      gathers_.gather_updated();
    } else {
      dev_.eng->step(opt_, a, lr, grad_scale, opt_step);
      refresh_compute_params<Types>(state_, dev_, gathers_, !writes);
    }
    dev_.eng->fill(state_.grad_shard.data(), state_.grad_shard.size(), 0.0f);
    gathers_.invalidate();
  }

  void refresh_params_from_master() { refresh_compute_params<Types>(state_, dev_, gathers_); }

 private:
  // ZeRO-0 keeps the whole master in the padded layout, which the shard's is not (a
  // tied copy's bucket has no piece of its own): its gradient is gathered a bucket at a time.
  static constexpr bool by_bucket() noexcept { return stage == 0; }

  Optimizer opt_;
  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
  param_gathers<Types>& gathers_;
};

}  // namespace strata::detail
