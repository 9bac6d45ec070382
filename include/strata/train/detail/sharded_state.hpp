// The buffers one rank holds for a sharding stage (DESIGN §4), sized once from the
// bucket plan, and the runs of the flat shard that the optimizer steps. Compute-side
// buffers live in Space; master and moments in OptSpace (pinned host memory when a CUDA
// trainer offloads them, which then also needs host copies of the grad shard and of the
// rounded params on their way back). ZeRO-3's param shard may live in pinned host memory
// too (offload_params), each piece copied up just before its gather.
#pragma once
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "../../parallel/bucket_plan.hpp"
#include "../../space/host.hpp"
#include "../report.hpp"
#include "io_staging.hpp"

namespace strata::detail {

// A run of master elements [begin, end) with one decay flag; its compute params start
// at out_begin in the params buffer (which is full for stages 0-2, a shard for stage 3).
struct update_run {
  std::size_t begin = 0, end = 0, out_begin = 0;
  bool decay = true;
  std::ptrdiff_t out_shift() const noexcept {
    return static_cast<std::ptrdiff_t>(out_begin) - static_cast<std::ptrdiff_t>(begin);
  }
};

// The element counts of a rank's buffers for a stage (the formulas of docs/architecture.md,
// "Memory"): what sharded_state allocates, and what a plan made before launch counts.
struct state_sizes {
  std::size_t params = 0, live = 0;                // compute params (param_bytes each)
  std::size_t grads = 0, grad_shard = 0;           // fp32, compute space
  std::size_t wire = 0, wire_out = 0;              // 16-bit, mixed precision only
  std::size_t reduced = 0;                         // fp32, fp32 training only
  std::size_t master = 0, state0 = 0, state1 = 0;  // fp32, optimizer space
  std::size_t host_grads = 0, host_params = 0;     // a device trainer's offload staging
  std::size_t host_param_shard = 0;                // ZeRO-3's params offloaded off a device

  // split: the optimizer space is not the compute space (a CUDA trainer's offload).
  // offload_params: a device trainer's ZeRO-3 param shard lives in host memory; its
  // rounded params are then written there, so the offload staging needs no copy of them.
  static state_sizes of(const bucket_plan& plan, int stage, int state_slots, bool mixed, bool split,
                        bool offload_params = false) {
    state_sizes n;
    const std::size_t total = plan.total(), shard = plan.shard_size();
    const std::size_t two_buckets = plan.slot_elems(), two_pieces = plan.slot_piece_elems();
    const bool params_off = offload_params && stage == 3;
    n.params = params_off ? 0 : stage < 3 ? total : shard;
    n.host_param_shard = params_off ? shard : 0;
    n.live = stage == 3 ? two_buckets : 0;  // ZeRO-3's gathered buckets, two in flight
    n.grads = two_buckets;                  // backward's two rotating slots, at every stage
    n.grad_shard = shard;
    n.wire = mixed ? two_buckets : 0;
    n.wire_out = mixed ? two_pieces : 0;
    n.reduced = mixed ? 0 : two_pieces;
    // ZeRO-0's master is whole, a tied copy's bucket held once (bucket::replica_offset).
    const std::size_t owned = stage == 0 ? plan.replica_total() : shard;
    n.master = owned;
    n.state0 = state_slots > 0 ? owned : 0;
    n.state1 = state_slots > 1 ? owned : 0;
    n.host_grads = split ? owned : 0;
    n.host_params = split && !params_off ? owned : 0;
    return n;
  }

  // Bytes by the trainer's report categories; compute_bytes is the 16-bit wire's element,
  // param_bytes the compute params' (2 on a GPU in mixed precision, else 4).
  memory_report report(std::size_t compute_bytes, bool split, bool offload, std::size_t activation_bytes,
                       std::size_t param_bytes = sizeof(float)) const {
    memory_report r;
    constexpr std::size_t f = sizeof(float);
    r.bytes["params"] = (params + live) * param_bytes;
    r.bytes["grads"] = (grads + grad_shard) * f;
    r.bytes["master"] = master * f;
    r.bytes["optimizer_states"] = (state0 + state1) * f;
    r.bytes["comm_buffers"] = reduced * f + (wire + wire_out) * compute_bytes;
    if (split) r.bytes["offload_staging"] = host_grads * f + host_params * param_bytes;
    if (host_param_shard) r.bytes["param_shard"] = host_param_shard * param_bytes;
    r.bytes["activations"] = activation_bytes;
    r.bytes["io_staging"] = io_staging_bytes;
    for (auto& [k, v] : r.bytes)
      r.offloaded[k] =
          (offload && (k == "master" || k == "optimizer_states" || k == "offload_staging")) || k == "param_shard";
    return r;
  }
};

// Param: the compute params' element type (trainer_types::param_t).
template <class Compute, class Space = host, class OptSpace = Space, class Param = float>
struct sharded_state {
  static constexpr bool split = !std::is_same_v<Space, OptSpace>;
  template <class T>
  using dev = buffer<T, Space>;
  template <class T>
  using opt = buffer<T, OptSpace>;
  dev<Param> params, live;
  dev<float> grads, grad_shard, reduced;
  opt<float> master, state0, state1;
  opt<float> host_grads;   // split only: the grad shard in transit
  opt<Param> host_params;  // split only: new params in transit
  // ZeRO-3's param shard in host memory (offload_params off the host), in place of params.
  buffer<Param, typename offload_space<Space>::type> host_param_shard;
  dev<Compute> wire, wire_out;  // 16-bit gradient staging for mixed precision
  std::vector<update_run> runs;
  std::vector<update_run> mirrors;  // compute params written from another run's master, not stepped
  state_sizes sizes;                // what allocate() sized the buffers to
  int rank = 0;

  void allocate(const bucket_plan& plan, int stage, int state_slots, bool mixed, int my_rank,
                bool offload_params = false) {
    rank = my_rank;
    const state_sizes n = sizes = state_sizes::of(plan, stage, state_slots, mixed, split, offload_params);
    params = dev<Param>(n.params);
    host_param_shard = decltype(host_param_shard)(n.host_param_shard);
    live = dev<Param>(n.live);
    grads = dev<float>(n.grads);
    grad_shard = dev<float>(n.grad_shard);
    wire = dev<Compute>(n.wire);
    wire_out = dev<Compute>(n.wire_out);
    reduced = dev<float>(n.reduced);
    master = opt<float>(n.master);
    state0 = opt<float>(n.state0);
    state1 = opt<float>(n.state1);
    host_grads = opt<float>(n.host_grads);
    host_params = opt<Param>(n.host_params);
    make_runs(plan, stage);
  }

  // Calls f(padded_offset, master_index, n) for the parts of the padded range [lo, hi)
  // whose master copy this rank holds: its piece of each bucket, or (ZeRO-0) the whole
  // bucket at its replica_offset.
  template <class F>
  void for_each_master_range(const bucket_plan& plan, int stage, std::size_t lo, std::size_t hi, F&& f) const {
    for (const auto& b : plan.buckets()) {
      const held_range h = b.held(rank, stage == 0);
      const std::size_t s = lo > h.padded ? lo : h.padded, e = hi < h.padded + h.count ? hi : h.padded + h.count;
      if (s < e) f(s, h.master + (s - h.padded), e - s);
    }
  }

  // Runs f(master, state0, state1) on host-readable arrays: the buffers themselves where
  // the host can read them, else copies (through the engine); with write_back, the
  // copies go back after.
  template <class Engine, class F>
  void with_host(Engine& eng, bool write_back, F&& f) {
    with_host_arrays(eng, write_back, 3, f);
  }
  // f(master) alone: the weight walks do not copy a device state's moments (two thirds
  // of it under AdamW) to the host and back.
  template <class Engine, class F>
  void with_host_master(Engine& eng, bool write_back, F&& f) {
    with_host_arrays(eng, write_back, 1, [&](float* master, float*, float*) { f(master); });
  }
  // The first `count` of master, state0, state1 as with_host says; the others are null
  // where they would have been copies.
  template <class Engine, class F>
  void with_host_arrays(Engine& eng, bool write_back, int count, F&& f) {
    if constexpr (OptSpace::host_accessible) {
      eng.synchronize();
      f(master.data(), state0.data(), state1.data());
    } else {
      std::vector<float> a[3];
      float* dev[3] = {master.data(), state0.data(), state1.data()};
      const std::size_t sizes_of[3] = {master.size(), state0.size(), state1.size()};
      float* host[3] = {nullptr, nullptr, nullptr};
      for (int k = 0; k < count; ++k) {
        a[k].resize(sizes_of[k]);
        eng.download(a[k].data(), dev[k], a[k].size());
        host[k] = a[k].data();
      }
      f(host[0], host[1], host[2]);
      if (write_back)
        for (int k = 0; k < count; ++k) eng.upload(dev[k], a[k].data(), a[k].size());
    }
  }

  // Whether the param shard lives in host memory (ZeRO-3 offload_params off the host).
  bool params_offloaded() const noexcept { return sizes.host_param_shard > 0; }
  // The compute params this rank holds: the full params (stages 0-2) or its shard (3).
  Param* param_data() noexcept { return params_offloaded() ? host_param_shard.data() : params.data(); }

  // Whether the optimizer's step writes the compute params in its own pass
  // (shard_args::param_out), one read of the master less: wherever they are stored as the
  // compute type (fp32, and 16 bits on a GPU). The host's mixed params are floats holding
  // 16-bit values, which no update functor writes; refresh_run rounds them after the step.
  static constexpr bool step_writes_params = std::is_same_v<Param, Compute>;

  // Where the optimizer side writes the compute params of run r: at out_param() +
  // written_run(r).out_begin. That is the params themselves, or, with the state on the
  // host, the pinned copy on its way up (at the master's index; upload_run moves it) or
  // the offloaded param shard, which a host master writes where it lives.
  Param* out_param() noexcept { return split && !params_offloaded() ? host_params.data() : param_data(); }
  update_run written_run(const update_run& r) const noexcept {
    return split && !params_offloaded() ? update_run{r.begin, r.end, r.begin, r.decay} : r;
  }
  // With the state on the host: run r's params, written in host_params, go up to the
  // device while the host goes on to the next run.
  template <class Engine>
  void upload_run(Engine& eng, const update_run& r) {
    if constexpr (split)
      if (!params_offloaded())
        eng.upload_async(params.data() + r.out_begin, host_params.data() + r.begin, r.end - r.begin);
  }

  // Compute params of run r = its master rounded to P, by the side that holds the master
  // (the device writes an offloaded param shard through unified addressing).
  template <class P, class Engine, class HostEngine>
  void refresh_run(Engine& eng, HostEngine& host_eng, const update_run& r) {
    const std::size_t n = r.end - r.begin;
    Param* out = out_param() + written_run(r).out_begin;
    if constexpr (split)
      round_params<P>(host_eng, master.data() + r.begin, out, n);
    else
      round_params<P>(eng, master.data() + r.begin, out, n);
    upload_run(eng, r);
  }

  // Compute params of a mirror run (a tied copy's place at stages 0-2): as refresh_run
  // writes them, after the runs that share its master; split, the rounded values already
  // wait in host_params.
  template <class P, class Engine>
  void refresh_mirror(Engine& eng, const update_run& r) {
    const std::size_t n = r.end - r.begin;
    if constexpr (split)
      eng.upload_async(params.data() + r.out_begin, host_params.data() + r.begin, n);
    else
      round_params<P>(eng, master.data() + r.begin, param_data() + r.out_begin, n);
  }

  // The runs of this rank's grad shard that hold the padded range [lo, hi).
  std::vector<std::pair<std::size_t, std::size_t>> shard_runs_inside(const bucket_plan& plan, std::size_t lo,
                                                                     std::size_t hi) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const auto& b : plan.buckets()) {
      const std::size_t pb = b.piece_begin(rank), pe = pb + b.piece;
      const std::size_t s = lo > pb ? lo : pb, e = hi < pe ? hi : pe;
      if (s < e) out.push_back({b.shard_offset + (s - pb), b.shard_offset + (e - pb)});
    }
    return out;
  }

  // The runs of this rank's grad shard outside the given padded ranges (sorted, disjoint).
  std::vector<std::pair<std::size_t, std::size_t>> shard_runs_outside(
      const bucket_plan& plan, const std::vector<std::pair<std::size_t, std::size_t>>& excluded) const {
    std::vector<std::pair<std::size_t, std::size_t>> out;
    for (const auto& b : plan.buckets()) {
      const std::size_t pb = b.piece_begin(rank), pe = pb + b.piece;
      std::size_t at = pb;
      for (const auto& [lo, hi] : excluded) {
        const std::size_t s = lo > pb ? lo : pb, e = hi < pe ? hi : pe;
        if (s >= e) continue;
        if (s > at) out.push_back({b.shard_offset + (at - pb), b.shard_offset + (s - pb)});
        at = e;
      }
      if (at < pe) out.push_back({b.shard_offset + (at - pb), b.shard_offset + (pe - pb)});
    }
    return out;
  }

  memory_report report(bool offload, std::size_t activation_bytes) const {
    return sizes.report(sizeof(Compute), split, offload, activation_bytes, sizeof(Param));
  }

 private:
  // out = master rounded to P: fp32 values of P's (Param float), or P itself.
  template <class P, class Engine>
  static void round_params(Engine& eng, const float* master, Param* out, std::size_t n) {
    if constexpr (std::is_same_v<Param, float>)
      eng.template round_into<P>(master, out, n);
    else
      eng.template narrow<Param>(master, out, n);
  }

  void make_runs(const bucket_plan& plan, int stage) {
    runs.clear();
    mirrors.clear();
    // The decay runs in master coordinates, split at what the master holds of each
    // bucket (bucket::held): stages 0-2 write each into its place in the full params
    // buffer, ZeRO-3 into the params shard (master coordinates too).
    const bool replicated = stage == 0;
    for (const auto& d : plan.master_runs(rank, replicated)) {
      for (const auto& b : plan.buckets()) {
        if (b.shares_piece) continue;
        const held_range h = b.held(rank, replicated);
        const std::size_t d_end = d.offset + d.count, h_end = h.master + h.count;
        const std::size_t s = d.offset > h.master ? d.offset : h.master, e = d_end < h_end ? d_end : h_end;
        if (s < e) runs.push_back({s, e, stage == 3 ? s : h.padded + (s - h.master), d.decay});
      }
    }
    // A tied copy sharing its source's piece: at stages 0-2 its params have a place of
    // their own in the full buffer, written from the same master (ZeRO-3 reads the piece).
    if (stage < 3)
      for (const auto& b : plan.buckets())
        if (const held_range h = b.held(rank, replicated); b.shares_piece && h.count)
          mirrors.push_back({h.master, h.master + h.count, h.padded, true});
  }
};

}  // namespace strata::detail
