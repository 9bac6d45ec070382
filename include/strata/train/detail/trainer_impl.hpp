// detail::trainer_impl: the body of strata::trainer (train/trainer.hpp), written once for
// every space against detail::engine<Space>. Every sharding stage runs the same bucket
// plan through the same reduce-scatter path, so ZeRO stages 0-3 give bitwise identical
// weights; a pipeline stage owns a contiguous run of layers and runs its schedule.
#pragma once
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../../comm/grid.hpp"
#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../../io/checkpoint.hpp"
#include "../../model/concepts.hpp"
#include "../../model/layout.hpp"
#include "../../optim/clip.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../../parallel/pipeline.hpp"
#include "../../parallel/policies.hpp"
#include "../../parallel/precision.hpp"
#include "../../space/host.hpp"
#include "../batch.hpp"
#include "../context.hpp"
#include "../init.hpp"
#include "../layer_table.hpp"
#include "../options.hpp"
#include "../report.hpp"
#include "consolidate.hpp"
#include "describe_params.hpp"
#include "device_side.hpp"
#include "sharded_state.hpp"
#include "stage_io.hpp"

namespace strata {

namespace detail {

// The trainer's body, shared by policies that compile to the same code: on the host,
// zero<S> and zero<S, offload_optimizer> differ only in how memory is reported, so they
// share one instantiation (half the compile time of programs that dispatch over both).
// Offload (true only off the host) keeps master and moments in offload_space<Space>.
template <class Model, class Space, int Stage, bool Offload, class Optimizer, class Precision, class Schedule>
class trainer_impl {
  static_assert(strata::model<Model>, "strata::trainer<Model, ...>: Model must satisfy strata::model (see model/concepts.hpp)");
  static_assert(detail::has_engine<Space>,
                "strata::trainer<Model, strata::cuda, ...>: the CUDA trainer's kernels are in CUDA headers: include "
                "<strata/cuda.cuh> from a .cu translation unit");

 public:
  using model_type = Model;
  using space_type = Space;
  using optimizer_type = Optimizer;
  using precision = Precision;
  using schedule = Schedule;
  using compute_t = typename Precision::compute_type;
  using comm_t = world_comm;
  using grid_t = grid<comm_t>;
  // Moves gradients and params: the host communicator itself, or NCCL on a GPU.
  using dev_comm_t = typename detail::device_side<Space>::comm_t;
  using ctx_t = context<Space, dev_comm_t>;
  using tensor_t = tensor<float, Space>;
  using opt_space = std::conditional_t<Offload, typename offload_space<Space>::type, Space>;
  static constexpr bool split = !std::is_same_v<opt_space, Space>;  // state off the device
  static constexpr bool on_host = std::is_same_v<Space, host>;
  static constexpr int stage = Stage;

  trainer_impl(grid_t& g, Model model, trainer_options opts, Optimizer opt, bool offload)
      : grid_(g), dp_(g.data()), model_(std::move(model)), opts_(std::move(opts)), opt_(opt), offload_(offload) {
    opts_.validate();
    expects<config_error>(on_host || pp_size() == 1, [&] {
      return detail::cat("strata::trainer: pipeline parallelism (pp = ", pp_size(), ") runs in the host space only so far; "
                         "use pipeline = 1 with strata::cuda");
    });
    assign_names(model_);
    layout_ = flat_layout::of(model_);
    table_ = detail::make_layer_table<ctx_t>(model_, static_cast<std::size_t>(opts_.micro_batches));
    choose_stage_layers();
    plan_ = bucket_plan(layout_, dp_.size(), opts_.bucket_elems, first_layer_, end_layer_);
    dev_.start(plan_.shard_size(), dp_, grid_.tensor(), ctx_);
    state_.allocate(plan_, stage, Optimizer::state_slots, Precision::is_mixed, dp_.rank());
    dev_.eng->prepare_step(state_.runs, state_.master.size());
    dev_.host_eng.prepare_step(state_.runs, state_.master.size());
    loss_slots_ = buffer<float, Space>(static_cast<std::size_t>(opts_.micro_batches));
    loss_host_.resize(loss_slots_.size());
    collect_param_offsets();
    bind_static_pointers();
    initialise_weights();
    const std::size_t nl = end_layer_ - first_layer_;
    acts_.resize(static_cast<std::size_t>(opts_.micro_batches));
    for (auto& slot : acts_) slot.resize(nl + 1);
    dacts_.resize(nl + 1);
    sends_.resize(static_cast<std::size_t>(opts_.micro_batches));
    slot_of_.assign(static_cast<std::size_t>(opts_.micro_batches), 0);
    actions_ = schedule_for<Schedule>(pp_rank(), pp_size(), opts_.micro_batches);
    gather_reqs_.reserve(plan_.buckets().size());
    if (pp_size() > 1) {
      // One communicator (lane) per direction: see detail/stage_io.hpp.
      pp_fwd_.emplace(grid_.pipeline().split(0, pp_rank()));
      pp_bwd_.emplace(grid_.pipeline().split(0, pp_rank()));
    }
    norm_runs_ = {{0, state_.grad_shard.size()}};
    if (grid_.tp_size() > 1 && grid_.tp_rank() != 0) collect_tp_norm_runs();
  }

  // Queued device work reads buffers about to be freed: wait (with the time-out).
  ~trainer_impl() {
    try {
      dev_.eng->synchronize();
    } catch (...) {  // a failed peer: its communicator was aborted
    }
  }
  trainer_impl(const trainer_impl&) = delete;
  trainer_impl& operator=(const trainer_impl&) = delete;

  // One optimizer step over this rank's rows of the global batch: the micro-batches run
  // through the pipeline schedule, then the shards step.
  step_stats step(const batch<Space>& b) {
    const auto t0 = std::chrono::steady_clock::now();
    check_batch(b);
    const float scale = loss_scale();
    idle_ = 0;
    bool first_backward = true;
    int free_slot = 0;
    for (const auto& a : actions_) {
      const int m = a.micro_batch;
      if (a.forward) {
        // A micro-batch takes the lowest free slot; 1F1B frees one per backward, so it
        // never uses more than (stages - stage) slots.
        const int slot = free_slot;
        slot_of_[static_cast<std::size_t>(m)] = slot;
        free_slot = next_free_slot(slot);
        forward_micro_batch(b, m, slot);
      } else {
        backward_micro_batch(m, scale / static_cast<float>(opts_.micro_batches), first_backward);
        first_backward = false;
        in_use_[static_cast<std::size_t>(slot_of_[static_cast<std::size_t>(m)])] = false;
        free_slot = next_free_slot(-1);
      }
    }
    for (auto& s : sends_) s.wait();
    if (bwd_send_) bwd_send_->wait();

    step_stats s;
    s.step = ++step_;
    s.loss = finish_loss();
    s.loss_scale = scale;
    s.lr = opts_.schedule.lr(step_ - 1);
    // One sum gives the global norm and the overflow verdict: a non-finite gradient on
    // any rank makes it non-finite everywhere.
    double sq = dev_.eng->sum_squares(state_.grad_shard.data(), norm_runs_);
    dp_.all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
    if (grid_.tp_size() > 1) grid_.tensor().all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
    if (pp_size() > 1) grid_.pipeline().all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
    const double unscale = 1.0 / (static_cast<double>(dp_.size()) * scale);
    s.grad_norm = std::sqrt(sq) * unscale;
    const bool overflow = !std::isfinite(sq) || !std::isfinite(s.loss);
    if (!scaler_.update(overflow)) {
      s.skipped = true;
      skipped_.push_back(s.step);
      dev_.eng->fill(state_.grad_shard.data(), state_.grad_shard.size(), 0.0f);
    } else {
      const float coef = clip_coefficient(s.grad_norm, opts_.max_grad_norm);
      apply_update(s.lr, static_cast<float>(coef * unscale), step_ - static_cast<long>(skipped_.size()));
    }
    dev_.eng->synchronize();  // a step's time includes its device work
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    s.idle_seconds = idle_;
    s.samples_per_s = static_cast<double>(b.inputs.dim(0)) * dp_.size() / s.seconds;
    return s;
  }

  // The mean loss of a batch under the current weights, without training (collective).
  float evaluate(const batch<Space>& b) {
    check_batch(b);
    for (int m = 0; m < opts_.micro_batches; ++m) forward_micro_batch(b, m, 0);
    for (auto& s : sends_) s.wait();
    return finish_loss();
  }

  // A device trainer also takes a batch in host memory, copied over first.
  template <class S>
    requires(!std::is_same_v<S, Space>)
  step_stats step(const batch<S>& b) {
    return step(dev_.stage(b));
  }
  template <class S>
    requires(!std::is_same_v<S, Space>)
  float evaluate(const batch<S>& b) {
    return evaluate(dev_.stage(b));
  }

  // fp32 master weights of the whole model in parameter order, tensor-parallel slices
  // assembled and pipeline stages concatenated, unpadded (collective over the grid).
  std::vector<float> gather_master() {
    std::vector<float> full_padded(plan_.total());
    state_.with_host(*dev_.eng, false, [&](float* master, float*, float*) {
      if constexpr (stage == 0) {
        std::copy_n(master, state_.master.size(), full_padded.begin());
      } else {
        for (const auto& bk : plan_.buckets()) {
          if (bk.size == 0) continue;
          dp_.all_gather(std::span<const float>(master + bk.shard_offset, bk.piece),
                         std::span<float>(full_padded.data() + bk.offset, bk.size));
        }
      }
    });
    std::vector<float> mine;
    std::vector<const param<float>*> params;
    for (std::size_t i : stage_params_) {
      const float* p = full_padded.data() + param_offset_[i];
      mine.insert(mine.end(), p, p + layout_.params()[i].numel);
      params.push_back(all_params_[i]);
    }
    return detail::concat_stages(grid_.pipeline(), detail::gather_tensor_slices(grid_.tensor(), params, mine));
  }

  // Writes a checkpoint of the current step under dir (collective); `extra` is kept
  // verbatim (a data position, say) and returned by load().
  void save(const std::filesystem::path& dir, nlohmann::json extra = nlohmann::json::object(),
            const checkpoint_options& o = {}) {
    state_.with_host(*dev_.eng, false, [&](float* master, float* s0, float* s1) {
      auto st = checkpoint_view(master, s0, s1);
      st.extra = std::move(extra);
      save_checkpoint(grid_.world(), dp_, st, dir, o);
    });
  }

  // Loads a checkpoint saved at any tensor x data x pipeline layout and stage; training
  // continues from its step exactly as the saved run would have (collective).
  nlohmann::json load(const std::filesystem::path& dir) {
    checkpoint_state st;
    state_.with_host(*dev_.eng, true, [&](float* master, float* s0, float* s1) {
      st = checkpoint_view(master, s0, s1);
      load_checkpoint(grid_.world(), st, dir);
    });
    step_ = st.step;
    skipped_ = st.skipped;
    scaler_.restore(st.scaler);
    refresh_params_from_master();
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
    return st.extra;
  }

  // Sets the weights from the whole model's full tensors in parameter order (as
  // gather_master() returns them): master and compute params of what this rank holds;
  // optimizer moments are left as they are. For initial weights from a file.
  void set_weights(std::span<const float> full) {
    std::vector<std::size_t> base(all_params_.size() + 1, 0);
    for (std::size_t i = 0; i < all_params_.size(); ++i) {
      const param<float>& p = *all_params_[i];
      base[i + 1] = base[i] + (p.sharded() ? p.full_shape.numel() : p.numel());
    }
    expects<config_error>(full.size() == base.back(), [&] {
      return detail::cat("strata::trainer::set_weights: ", full.size(), " values for a model of ", base.back());
    });
    fill_master([&](std::size_t i, std::size_t global) { return full[base[i] + global]; });
  }

  memory_report memory() const { return state_.report(plan_, stage, offload_, activation_bytes()); }
  const flat_layout& layout() const noexcept { return layout_; }
  const bucket_plan& plan() const noexcept { return plan_; }
  const std::vector<long>& skipped_steps() const noexcept { return skipped_; }
  long steps_done() const noexcept { return step_; }
  float loss_scale() const noexcept { return scaler_.scale(); }
  Model& model() noexcept { return model_; }
  grid_t& grid_ref() noexcept { return grid_; }
  const trainer_options& options() const noexcept { return opts_; }
  // This pipeline stage's layers [first, end) in model order.
  std::pair<std::size_t, std::size_t> stage_layers() const noexcept { return {first_layer_, end_layer_}; }
  // Activation bytes held for in-flight micro-batches (grows to the schedule's peak).
  std::size_t activation_bytes() const {
    std::size_t n = 0;
    for (auto& slot : acts_)
      for (auto& t : slot) n += t.capacity() * sizeof(float);
    for (auto& t : dacts_) n += t.capacity() * sizeof(float);
    return n;
  }

 private:
  int pp_rank() const { return grid_.pp_rank(); }
  int pp_size() const { return grid_.pp_size(); }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == pp_size() - 1; }

  void check_batch(const batch<Space>& b) const { check_batch_rows(b, opts_.micro_batches); }

  // Mean loss over micro-batches on the last stage (summed in micro-batch order), sent
  // to every stage, averaged over the data-parallel ranks (tensor ranks already agree).
  float finish_loss() {
    double loss_sum = 0;
    if (is_last_stage()) {
      dev_.eng->download(loss_host_.data(), loss_slots_.data(), loss_host_.size());
      for (float l : loss_host_) loss_sum += l;
    }
    float loss = static_cast<float>(loss_sum / opts_.micro_batches);
    if (pp_size() > 1) grid_.pipeline().broadcast(std::span<float>(&loss, 1), pp_size() - 1);
    dp_.all_reduce(std::span<float>(&loss, 1), reduce_op::avg);
    return loss;
  }

  int next_free_slot(int taken) {
    if (in_use_.size() != acts_.size()) in_use_.assign(acts_.size(), false);
    if (taken >= 0) in_use_[static_cast<std::size_t>(taken)] = true;
    for (std::size_t i = 0; i < in_use_.size(); ++i)
      if (!in_use_[i]) return static_cast<int>(i);
    return 0;
  }

  // ---- construction -----------------------------------------------------------------
  void choose_stage_layers() {
    std::vector<std::size_t> sizes;
    for (const auto& seg : layout_.segments()) sizes.push_back(seg.used);
    std::tie(first_layer_, end_layer_) = stage_layer_range(sizes, opts_.pipeline_cuts, pp_size(), pp_rank());
  }

  void collect_param_offsets() {
    std::size_t i = 0;
    for (std::size_t l = 0; l < table_.size(); ++l) {
      layer_first_param_.push_back(i);
      for (auto* p : table_[l].params) {
        expects(i < layout_.params().size() && p->name == layout_.params()[i].name,
                "strata::trainer: the layer walk and the flat layout disagree on the param order");
        all_params_.push_back(p);
        const bool mine = l >= first_layer_ && l < end_layer_;
        param_offset_.push_back(mine ? plan_.to_padded(layout_.params()[i].offset) : 0);
        if (mine) stage_params_.push_back(i);
        ++i;
      }
    }
    layer_first_param_.push_back(i);
  }

  template <class F>
  void for_each_layer_param(std::size_t l, F&& f) {
    for (std::size_t i = layer_first_param_[l]; i < layer_first_param_[l + 1]; ++i) f(*all_params_[i], param_offset_[i]);
  }

  // Params (stages 0-2) and grads (stages 0-1) have one full buffer: bind once.
  void bind_static_pointers() {
    for (std::size_t l = first_layer_; l < end_layer_; ++l)
      for_each_layer_param(l, [&](param<float>& p, std::size_t off) {
        if constexpr (stage < 3) p.data_ptr = state_.params.data() + off;
        if constexpr (stage < 2) p.grad_ptr = state_.grads.data() + off;
      });
  }

  // Fills master (and the compute params) from each param's init_spec, only for the
  // elements this rank holds; tensor-parallel slices draw from their full tensor.
  void initialise_weights() {
    std::vector<std::uint64_t> keys(layout_.params().size());
    for (std::size_t i : stage_params_) keys[i] = detail::init_key(opts_.seed, layout_.params()[i].name);
    fill_master([&](std::size_t i, std::size_t global) { return detail::init_value(layout_.params()[i].init, keys[i], global); });
  }

  // Sets each master element this rank holds to value(param index, index in the full
  // tensor), then the compute params from master.
  template <class F>
  void fill_master(F&& value) {
    state_.with_host(*dev_.eng, true, [&](float* master, float*, float*) {
      for (std::size_t i : stage_params_) {
        const param<float>& p = *all_params_[i];
        const std::size_t lo = param_offset_[i], hi = lo + layout_.params()[i].numel;
        state_.for_each_master_range(plan_, stage, lo, hi, [&](std::size_t padded, std::size_t master_idx, std::size_t n) {
          for (std::size_t j = 0; j < n; ++j) master[master_idx + j] = value(i, p.global_index(padded - lo + j));
        });
      }
    });
    refresh_params_from_master();
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
  }

  // Params replicated over tensor-parallel ranks (norms, row-parallel biases) have
  // equal gradients on every tensor rank: only tensor rank 0 counts them in the norm.
  void collect_tp_norm_runs() {
    std::vector<detail::index_range> replicated;  // padded ranges
    for (std::size_t i : stage_params_)
      if (!all_params_[i]->sharded()) replicated.push_back({param_offset_[i], param_offset_[i] + layout_.params()[i].numel});
    norm_runs_ = state_.shard_runs_outside(plan_, replicated);
  }

  // ---- forward / backward -------------------------------------------------------------
  void slice_rows(const tensor_t& src, int k, int K, tensor_t& dst) {
    shape s = src.shape();
    s[0] /= K;
    dst.resize(s);
    dev_.eng->copy(dst.data(), src.data() + static_cast<std::size_t>(k) * dst.numel(), dst.numel());
  }

  void forward_micro_batch(const batch<Space>& b, int m, int slot) {
    auto& acts = acts_[static_cast<std::size_t>(slot)];
    sends_[static_cast<std::size_t>(slot)].wait();  // the slot's output may still be on its way
    if (is_first_stage()) slice_rows(b.inputs, m, opts_.micro_batches, acts[0]);
    else idle_ += detail::recv_tensor(*pp_fwd_, acts[0], pp_rank() - 1);
    if (is_last_stage()) {
      slice_rows(b.targets, m, opts_.micro_batches, mb_targets_);
      ctx_.set_targets(&mb_targets_);
    }
    ctx_.set_micro_batch(m);
    for (std::size_t l = first_layer_; l < end_layer_; ++l) {
      if constexpr (stage == 3) ensure_live(plan_.bucket_of_layer(l), true);
      table_[l].run_forward(ctx_, acts[l - first_layer_], acts[l - first_layer_ + 1], static_cast<std::size_t>(slot));
    }
    if (is_last_stage()) {
      expects(acts.back().numel() == 1, [&] {
        return detail::cat("strata::trainer: the model's last layer must be a loss layer producing one value; it produced ",
                           acts.back().shape().str());
      });
      dev_.eng->copy(loss_slots_.data() + m, acts.back().data(), 1);
    } else
      detail::send_tensor(*pp_fwd_, acts.back(), pp_rank() + 1, sends_[static_cast<std::size_t>(slot)]);
  }

  void backward_micro_batch(int m, float dloss, bool first_backward) {
    const std::size_t nl = end_layer_ - first_layer_;
    const int slot = slot_of_[static_cast<std::size_t>(m)];
    if (is_last_stage()) {
      dacts_[nl].resize(shape{1});
      dev_.eng->fill(dacts_[nl].data(), 1, dloss);
    } else {
      idle_ += detail::recv_tensor(*pp_bwd_, dacts_[nl], pp_rank() + 1);
    }
    if (bwd_send_) bwd_send_->wait();  // dacts_[0] is about to be overwritten
    ctx_.set_micro_batch(m);
    const auto& buckets = plan_.buckets();
    for (std::size_t l = end_layer_; l-- > first_layer_;) {
      const std::size_t b = plan_.bucket_of_layer(l);
      if constexpr (stage == 3) ensure_live(b, false);
      if (l + 1 == buckets[b].end_layer) begin_bucket_grads(b, first_backward);
      table_[l].run_backward(ctx_, dacts_[l - first_layer_ + 1], dacts_[l - first_layer_], static_cast<std::size_t>(slot));
      if (l == buckets[b].first_layer) launch_reduce(b);
    }
    for (int s = 0; s < 2; ++s) finish_reduce(s);
    if (!is_first_stage()) {
      if (!bwd_send_) bwd_send_.emplace();
      detail::send_tensor(*pp_bwd_, dacts_[0], pp_rank() - 1, *bwd_send_);
    }
  }

  // Gradient slot of bucket b: a region of the full grad buffer (stages 0-1) or one of
  // two rotating bucket buffers (stages 2-3). Zeroed, and the layers' grads bound to it.
  float* grad_region(std::size_t b) {
    if constexpr (stage < 2) return state_.grads.data() + plan_.buckets()[b].offset;
    else return state_.grads.data() + (b % 2) * plan_.max_bucket();
  }

  void begin_bucket_grads(std::size_t b, bool first_backward) {
    const int slot = static_cast<int>(b % 2);
    finish_reduce(slot);  // the slot's previous bucket must be reduced before reuse
    const auto& bk = plan_.buckets()[b];
    float* region = grad_region(b);
    dev_.eng->fill(region, bk.size, 0.0f);
    if constexpr (stage >= 2) {
      for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
        for_each_layer_param(l, [&](param<float>& p, std::size_t off) { p.grad_ptr = region + (off - bk.offset); });
    }
    pending_[slot].bucket = b;
    pending_[slot].first = first_backward;
  }

  void launch_reduce(std::size_t b) {
    const int slot = static_cast<int>(b % 2);
    const auto& bk = plan_.buckets()[b];
    if (bk.size == 0) return;
    float* region = grad_region(b);
    if constexpr (Precision::is_mixed) {
      // 16-bit gradients on the wire, as on a GPU; accumulation stays fp32.
      compute_t* wire = state_.wire.data() + slot * plan_.max_bucket();
      dev_.eng->template narrow<compute_t>(region, wire, bk.size);
      pending_[slot].req = dev_.dp->reduce_scatter_async(std::span<const compute_t>(wire, bk.size),
                                                    std::span<compute_t>(state_.wire_out.data() + slot * plan_.max_piece(), bk.piece));
    } else {
      pending_[slot].req = dev_.dp->reduce_scatter_async(std::span<const float>(region, bk.size),
                                                    std::span<float>(state_.reduced.data() + slot * plan_.max_piece(), bk.piece));
    }
  }

  // Waits for the slot's reduce-scatter and adds its piece into the fp32 grad shard.
  void finish_reduce(int slot) {
    auto& p = pending_[slot];
    if (!p.req.pending()) return;
    p.req.wait();
    const auto& bk = plan_.buckets()[p.bucket];
    float* acc = state_.grad_shard.data() + bk.shard_offset;
    if constexpr (Precision::is_mixed)
      dev_.eng->widen_accumulate(state_.wire_out.data() + slot * plan_.max_piece(), acc, bk.piece, p.first);
    else
      dev_.eng->accumulate(acc, state_.reduced.data() + slot * plan_.max_piece(), bk.piece, p.first);
  }

  // ZeRO-3: makes bucket b's params live in its slot, and prefetches the next bucket in
  // the direction of travel so its all-gather overlaps this bucket's compute.
  void ensure_live(std::size_t b, bool forward) {
    auto& slot = live_[b % 2];
    if (slot.bucket != b || !slot.valid) start_gather(b);
    if (slot.req.pending()) {
      slot.req.wait();
      bind_live(b);
    }
    const auto& buckets = plan_.buckets();
    const bool has_next = forward ? b + 1 < buckets.size() && buckets[b + 1].first_layer < end_layer_
                                  : b > 0 && buckets[b - 1].end_layer > first_layer_;
    if (has_next) {
      const std::size_t next = forward ? b + 1 : b - 1;
      if (live_[next % 2].bucket != next || !live_[next % 2].valid) start_gather(next);
    }
  }

  void start_gather(std::size_t b) {
    auto& slot = live_[b % 2];
    if (slot.req.pending()) slot.req.wait();
    const auto& bk = plan_.buckets()[b];
    slot.bucket = b;
    slot.valid = true;
    if (bk.size == 0) {
      bind_live(b);
      return;
    }
    slot.req = dev_.dp->all_gather_async(std::span<const float>(state_.params.data() + bk.shard_offset, bk.piece),
                                    std::span<float>(state_.live.data() + (b % 2) * plan_.max_bucket(), bk.size));
  }

  void bind_live(std::size_t b) {
    const auto& bk = plan_.buckets()[b];
    float* base = state_.live.data() + (b % 2) * plan_.max_bucket();
    for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
      for_each_layer_param(l, [&](param<float>& p, std::size_t off) { p.data_ptr = base + (off - bk.offset); });
  }

  // ---- optimizer step ---------------------------------------------------------------
  void apply_update(float lr, float grad_scale, long opt_step) {
    float* grads = state_.grad_shard.data();
    if constexpr (stage == 0) {
      // Replicated: all-gather the reduced shards, then every rank updates everything.
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        dev_.dp->all_gather(std::span<const float>(state_.grad_shard.data() + bk.shard_offset, bk.piece),
                         std::span<float>(state_.grads.data() + bk.offset, bk.size));
      }
      grads = state_.grads.data();
    }
    shard_args<float, float> a{};
    a.master = state_.master.data();
    a.grad = grads;
    a.state0 = Optimizer::state_slots > 0 ? state_.state0.data() : nullptr;
    a.state1 = Optimizer::state_slots > 1 ? state_.state1.data() : nullptr;
    a.n = state_.master.size();
    if constexpr (split) {
      // Offloaded: the grad shard comes to the host, the host steps run by run, and each
      // run's new params go back to the device while the host steps the next one.
      dev_.eng->download(state_.host_grads.data(), grads, a.n);
      a.grad = state_.host_grads.data();
      for (const auto& r : state_.runs) {
        dev_.host_eng.step_run(opt_, a, r, lr, grad_scale, opt_step);
        state_.template refresh_run<compute_t>(*dev_.eng, dev_.host_eng, r);
      }
      gather_params();
    } else {
      dev_.eng->step(opt_, a, lr, grad_scale, opt_step);
      refresh_params_from_master();
    }
    dev_.eng->fill(state_.grad_shard.data(), state_.grad_shard.size(), 0.0f);
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
  }

  // Compute params = master rounded to the compute precision; then stages 1-2 all-gather
  // the pieces so every rank holds the full params again.
  void refresh_params_from_master() {
    if constexpr (split) dev_.eng->synchronize();  // host_params may still be on its way
    for (const auto& r : state_.runs) state_.template refresh_run<compute_t>(*dev_.eng, dev_.host_eng, r);
    gather_params();
  }

  void gather_params() {
    if constexpr (stage == 1 || stage == 2) {
      gather_reqs_.clear();
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        float* region = state_.params.data() + bk.offset;
        gather_reqs_.push_back(dev_.dp->all_gather_async(
            std::span<const float>(region + bk.piece * static_cast<std::size_t>(dp_.rank()), bk.piece),
            std::span<float>(region, bk.size)));
      }
      for (auto& r : gather_reqs_) r.wait();
      gather_reqs_.clear();
    }
  }

  checkpoint_state checkpoint_view(float* master, float* state0, float* state1) {
    checkpoint_state st;
    detail::describe_params(st, layout_, all_params_, param_offset_, stage_params_);
    st.plan = &plan_;
    st.optimizer = Optimizer::name;
    st.precision = Precision::name;
    st.state_slots = Optimizer::state_slots;
    st.stage = stage;
    st.dp_rank = dp_.rank();
    st.dp_size = dp_.size();
    st.tp = grid_.tp_size();
    st.pp = pp_size();
    st.tp_rank = grid_.tp_rank();
    st.pp_rank = pp_rank();
    st.replicated_master = stage == 0;
    st.arrays[0] = master;
    st.arrays[1] = state0;
    st.arrays[2] = state1;
    st.owned = state_.master.size();
    st.for_each_owned = [this](std::size_t lo, std::size_t hi,
                               const std::function<void(std::size_t, std::size_t, std::size_t)>& f) {
      state_.for_each_master_range(plan_, stage, lo, hi, f);
    };
    st.step = step_;
    st.skipped = skipped_;
    st.scaler = scaler_.save();
    st.seed = opts_.seed;
    return st;
  }

  // fp16 uses the dynamic scaler; other precisions a static scale of 1, which still
  // turns a non-finite gradient into a skipped step.
  static loss_scaler make_loss_scaler(const trainer_options& o) {
    if constexpr (Precision::uses_loss_scaling) return loss_scaler(o.loss_scaler);
    loss_scaler_options fixed;
    fixed.loss_scale = 1.0f;
    return loss_scaler(fixed);
  }

  struct pending_reduce {
    request req;
    std::size_t bucket = 0;
    bool first = true;
  };
  struct live_slot {
    request req;
    std::size_t bucket = 0;
    bool valid = false;
  };

  grid_t& grid_;
  comm_t& dp_;
  Model model_;
  trainer_options opts_;
  Optimizer opt_;
  bool offload_ = false;
  flat_layout layout_;
  bucket_plan plan_;
  std::vector<detail::layer_entry<ctx_t>> table_;
  std::size_t first_layer_ = 0, end_layer_ = 0;
  detail::device_side<Space> dev_;
  detail::sharded_state<compute_t, Space, opt_space> state_;
  buffer<float, Space> loss_slots_;  // the last stage's loss per micro-batch
  std::vector<float> loss_host_;     // and its copy on the host
  std::vector<std::size_t> param_offset_, layer_first_param_, stage_params_;
  std::vector<param<float>*> all_params_;  // in layout order, every stage's
  std::vector<std::vector<tensor_t>> acts_;  // [slot][layer boundary]
  std::vector<tensor_t> dacts_;
  std::vector<detail::pending_send> sends_;  // per slot: its output on the way forward
  std::optional<detail::pending_send> bwd_send_;
  std::vector<int> slot_of_;
  std::vector<bool> in_use_;
  std::vector<pipeline_action> actions_;
  std::optional<comm_t> pp_fwd_, pp_bwd_;
  std::vector<detail::index_range> norm_runs_;  // of the grad shard, counted in the norm
  tensor_t mb_targets_;
  ctx_t ctx_;
  pending_reduce pending_[2];
  live_slot live_[2];
  std::vector<request> gather_reqs_;
  loss_scaler scaler_ = make_loss_scaler(opts_);
  long step_ = 0;
  std::vector<long> skipped_;
  double idle_ = 0;
};

}  // namespace detail

}  // namespace strata
