// trainer<Model, Space, Sharding, Optimizer, Precision>: trains a user's model across the
// data-parallel ranks of a grid. Every sharding stage runs the same bucket plan through
// the same reduce-scatter path, so stages 0-3 give bitwise identical weights.
#pragma once
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../comm/grid.hpp"
#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../io/checkpoint.hpp"
#include "../kernels/reduce.hpp"
#include "../model/concepts.hpp"
#include "../model/layout.hpp"
#include "../optim/clip.hpp"
#include "../parallel/bucket_plan.hpp"
#include "../parallel/policies.hpp"
#include "../parallel/precision.hpp"
#include "../space/host.hpp"
#include "batch.hpp"
#include "context.hpp"
#include "detail/sharded_state.hpp"
#include "init.hpp"
#include "layer_table.hpp"
#include "options.hpp"
#include "report.hpp"

namespace strata {

template <class Model, class Space = host, class Sharding = replicated, class Optimizer = adamw,
          class Precision = fp32>
class trainer {
  static_assert(strata::model<Model>, "strata::trainer<Model, ...>: Model must satisfy strata::model (see model/concepts.hpp)");
  static_assert(sharding_policy<Sharding>, "strata::trainer: Sharding must be strata::replicated or strata::zero<S, ...>");
  static_assert(precision_policy<Precision>, "strata::trainer: Precision must be strata::fp32 or strata::mixed<bf16|fp16>");
  static_assert(std::is_same_v<Space, host>, "strata::trainer: no specialization for this space yet (host only)");
  static_assert(!(Sharding::offload && Sharding::stage == 0), "strata::trainer: offload_optimizer needs zero<1|2|3>");

 public:
  using model_type = Model;
  using space_type = Space;
  using sharding = Sharding;
  using optimizer_type = Optimizer;
  using precision = Precision;
  using compute_t = typename Precision::compute_type;
  using comm_t = world_comm;
  using grid_t = grid<comm_t>;
  using ctx_t = context<Space>;
  using tensor_t = tensor<float, Space>;
  static constexpr int stage = Sharding::stage;

  trainer(grid_t& g, Model model, trainer_options opts = {}, Optimizer opt = {})
      : grid_(g), dp_(g.data()), model_(std::move(model)), opts_(std::move(opts)), opt_(opt) {
    opts_.validate();
    expects<config_error>(g.tp_size() == 1 && g.pp_size() == 1,
                          detail::cat("strata::trainer: tensor/pipeline sizes ", g.tp_size(), "/", g.pp_size(),
                                      " need the tensor- and pipeline-parallel trainer; this one is data parallel"));
    assign_names(model_);
    layout_ = flat_layout::of(model_);
    plan_ = bucket_plan(layout_, dp_.size(), opts_.bucket_elems);
    table_ = detail::make_layer_table<ctx_t>(model_, 1);
    state_.allocate(plan_, stage, Optimizer::state_slots, Precision::is_mixed, dp_.rank());
    collect_param_offsets();
    bind_static_pointers();
    initialise_weights();
    acts_.resize(table_.size() + 1);
    dacts_.resize(table_.size() + 1);
    gather_reqs_.reserve(plan_.buckets().size());
  }

  trainer(const trainer&) = delete;
  trainer& operator=(const trainer&) = delete;

  // One optimizer step over this rank's rows of the global batch.
  step_stats step(const batch<Space>& b) {
    const auto t0 = std::chrono::steady_clock::now();
    const int K = opts_.micro_batches;
    const std::int64_t rows = b.inputs.shape().rank ? b.inputs.dim(0) : 0;
    expects<config_error>(rows > 0 && rows % K == 0,
                          detail::cat("strata::trainer::step: the batch has ", rows, " rows, which ", K,
                                      " micro-batches do not divide"));
    expects<config_error>(b.targets.shape().rank > 0 && b.targets.dim(0) == rows,
                          detail::cat("strata::trainer::step: targets have ", b.targets.shape().str(),
                                      " but inputs have ", rows, " rows"));
    const float scale = loss_scale();
    double loss_sum = 0;
    for (int k = 0; k < K; ++k) {
      slice_rows(b.inputs, k, K, acts_[0]);
      slice_rows(b.targets, k, K, mb_targets_);
      ctx_.set_targets(&mb_targets_);
      ctx_.set_micro_batch(k);
      forward_pass();
      loss_sum += acts_.back()[0];
      backward_pass(scale / static_cast<float>(K), k == 0);
    }
    // Mean loss over micro-batches, then over ranks.
    float loss = static_cast<float>(loss_sum / K);
    dp_.all_reduce(std::span<float>(&loss, 1), reduce_op::avg);

    step_stats s;
    s.step = ++step_;
    s.loss = loss;
    s.loss_scale = scale;
    s.lr = opts_.schedule.lr(step_ - 1);
    // One all-reduce gives both the global norm and the overflow verdict: a non-finite
    // gradient on any rank makes the sum non-finite on every rank.
    double sq = kernels::sum_squares(std::span<const float>(state_.grad_shard.data(), state_.grad_shard.size()));
    dp_.all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
    const double unscale = 1.0 / (static_cast<double>(dp_.size()) * scale);
    s.grad_norm = std::sqrt(sq) * unscale;
    const bool overflow = !std::isfinite(sq) || !std::isfinite(loss);
    const bool apply = scaler_update(overflow);
    if (!apply) {
      s.skipped = true;
      skipped_.push_back(s.step);
    } else {
      const float coef = clip_coefficient(s.grad_norm, opts_.max_grad_norm);
      apply_update(s.lr, static_cast<float>(coef * unscale), step_ - skipped_count());
    }
    const auto t1 = std::chrono::steady_clock::now();
    s.seconds = std::chrono::duration<double>(t1 - t0).count();
    s.samples_per_s = static_cast<double>(rows) * dp_.size() / s.seconds;
    return s;
  }

  // fp32 master weights of every param, in parameter order, unpadded (collective).
  std::vector<float> gather_master() {
    std::vector<float> full_padded(plan_.total());
    if constexpr (stage == 0) {
      std::copy(state_.master.begin(), state_.master.end(), full_padded.begin());
    } else {
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        dp_.all_gather(std::span<const float>(state_.master.data() + bk.shard_offset, bk.piece),
                       std::span<float>(full_padded.data() + bk.offset, bk.size));
      }
    }
    std::vector<float> out;
    out.reserve(layout_.params().size() ? plan_.total() : 0);
    for (std::size_t i = 0; i < layout_.params().size(); ++i) {
      const auto& slot = layout_.params()[i];
      const float* p = full_padded.data() + param_offset_[i];
      out.insert(out.end(), p, p + slot.numel);
    }
    return out;
  }

  // Writes a checkpoint of the current step under dir (collective); `extra` is kept
  // verbatim (a data position, say) and returned by load().
  void save(const std::filesystem::path& dir, nlohmann::json extra = nlohmann::json::object(),
            const checkpoint_options& o = {}) {
    auto st = checkpoint_view();
    st.extra = std::move(extra);
    save_checkpoint(dp_, st, dir, o);
  }

  // Loads a checkpoint saved at any data-parallel size and stage; training continues
  // from its step exactly as the saved run would have (collective).
  nlohmann::json load(const std::filesystem::path& dir) {
    auto st = checkpoint_view();
    load_checkpoint(dp_, st, dir);
    step_ = st.step;
    skipped_ = st.skipped;
    scaler_.restore(st.scaler);
    refresh_params_from_master();
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
    return st.extra;
  }

  // The mean loss of a batch under the current weights, without training (collective).
  float evaluate(const batch<Space>& b) {
    const int K = opts_.micro_batches;
    double loss_sum = 0;
    for (int k = 0; k < K; ++k) {
      slice_rows(b.inputs, k, K, acts_[0]);
      slice_rows(b.targets, k, K, mb_targets_);
      ctx_.set_targets(&mb_targets_);
      forward_pass();
      loss_sum += acts_.back()[0];
    }
    float loss = static_cast<float>(loss_sum / K);
    dp_.all_reduce(std::span<float>(&loss, 1), reduce_op::avg);
    return loss;
  }

  memory_report memory() const { return state_.report(plan_, stage, Sharding::offload, acts_bytes()); }
  const flat_layout& layout() const noexcept { return layout_; }
  const bucket_plan& plan() const noexcept { return plan_; }
  const std::vector<long>& skipped_steps() const noexcept { return skipped_; }
  long steps_done() const noexcept { return step_; }
  float loss_scale() const noexcept { return scaler_.scale(); }
  Model& model() noexcept { return model_; }
  grid_t& grid_ref() noexcept { return grid_; }
  const trainer_options& options() const noexcept { return opts_; }

 private:
  checkpoint_state checkpoint_view() {
    checkpoint_state st;
    for (const auto& slot : layout_.params()) {
      st.names.push_back(slot.name);
      st.shapes.push_back(slot.shape);
    }
    st.param_offset = param_offset_;
    st.plan = &plan_;
    st.optimizer = Optimizer::name;
    st.precision = Precision::name;
    st.state_slots = Optimizer::state_slots;
    st.stage = stage;
    st.dp_rank = dp_.rank();
    st.dp_size = dp_.size();
    st.replicated_master = stage == 0;
    st.arrays[0] = state_.master.data();
    st.arrays[1] = state_.state0.data();
    st.arrays[2] = state_.state1.data();
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

  // ---- construction -----------------------------------------------------------------
  void collect_param_offsets() {
    for (const auto& slot : layout_.params()) param_offset_.push_back(plan_.to_padded(slot.offset));
    std::size_t i = 0;
    for (auto& e : table_)
      for (auto* p : e.params) {
        expects(i < layout_.params().size() && p->name == layout_.params()[i].name,
                "strata::trainer: the layer walk and the flat layout disagree on the param order");
        all_params_.push_back(p);
        layer_param_offset_.push_back(param_offset_[i++]);
      }
    std::size_t first = 0;
    for (auto& e : table_) {
      layer_first_param_.push_back(first);
      first += e.params.size();
    }
  }

  // Params (stages 0-2) and grads (stages 0-1) have one full buffer: bind once.
  void bind_static_pointers() {
    for (std::size_t l = 0; l < table_.size(); ++l) {
      auto& e = table_[l];
      for (std::size_t j = 0; j < e.params.size(); ++j) {
        const std::size_t off = layer_param_offset_[layer_first_param_[l] + j];
        if constexpr (stage < 3) e.params[j]->data_ptr = state_.params.data() + off;
        if constexpr (stage < 2) e.params[j]->grad_ptr = state_.grads.data() + off;
      }
    }
  }

  // Fills master (and the compute params) from each param's init_spec, only for the
  // elements this rank holds.
  void initialise_weights() {
    const auto& params = layout_.params();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& slot = params[i];
      const std::uint64_t key = detail::init_key(opts_.seed, slot.name);
      const std::size_t lo = param_offset_[i], hi = lo + slot.numel;
      state_.for_each_master_range(plan_, stage, lo, hi, [&](std::size_t padded, std::size_t master_idx, std::size_t n) {
        // Tensor-parallel slices draw the elements of the full tensor they are part of.
        const param<float>& p = *all_params_[i];
        for (std::size_t j = 0; j < n; ++j)
          state_.master[master_idx + j] = detail::init_value(slot.init, key, p.global_index(padded - lo + j));
      });
    }
    refresh_params_from_master();
  }

  // ---- forward / backward -------------------------------------------------------------
  static void slice_rows(const tensor_t& src, int k, int K, tensor_t& dst) {
    shape s = src.shape();
    const std::size_t row = src.numel() / static_cast<std::size_t>(s[0]);
    s[0] /= K;
    dst.resize(s);
    std::copy_n(src.data() + static_cast<std::size_t>(k) * dst.numel(), dst.numel(), dst.data());
    (void)row;
  }

  void forward_pass() {
    const std::size_t L = table_.size();
    for (std::size_t l = 0; l < L; ++l) {
      if constexpr (stage == 3) ensure_live(plan_.bucket_of_layer(l), true);
      table_[l].run_forward(ctx_, acts_[l], acts_[l + 1], 0);
    }
    expects(acts_.back().numel() == 1,
            detail::cat("strata::trainer: the model's last layer must be a loss layer producing one value; it produced ",
                        acts_.back().shape().str()));
  }

  void backward_pass(float dloss, bool first_micro_batch) {
    const std::size_t L = table_.size();
    dacts_[L].resize(shape{1});
    dacts_[L][0] = dloss;
    const auto& buckets = plan_.buckets();
    for (std::size_t l = L; l-- > 0;) {
      const std::size_t b = plan_.bucket_of_layer(l);
      if constexpr (stage == 3) ensure_live(b, false);
      if (l + 1 == buckets[b].end_layer) begin_bucket_grads(b, first_micro_batch);
      table_[l].run_backward(ctx_, dacts_[l + 1], dacts_[l], 0);
      if (l == buckets[b].first_layer) launch_reduce(b);
    }
    for (int s = 0; s < 2; ++s) finish_reduce(s);
  }

  // Gradient slot of bucket b: a region of the full grad buffer (stages 0-1) or one of
  // two rotating bucket buffers (stages 2-3). Zeroed, and the layers' grads bound to it.
  float* grad_region(std::size_t b) {
    if constexpr (stage < 2) return state_.grads.data() + plan_.buckets()[b].offset;
    else return state_.grads.data() + (b % 2) * plan_.max_bucket();
  }

  void begin_bucket_grads(std::size_t b, bool first_micro_batch) {
    const int slot = static_cast<int>(b % 2);
    finish_reduce(slot);  // the slot's previous bucket must be reduced before reuse
    const auto& bk = plan_.buckets()[b];
    float* region = grad_region(b);
    std::fill_n(region, bk.size, 0.0f);
    if constexpr (stage >= 2) {
      for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
        for (std::size_t j = 0; j < table_[l].params.size(); ++j)
          table_[l].params[j]->grad_ptr = region + (layer_param_offset_[layer_first_param_[l] + j] - bk.offset);
    }
    pending_[slot].bucket = b;
    pending_[slot].first = first_micro_batch;
  }

  void launch_reduce(std::size_t b) {
    const int slot = static_cast<int>(b % 2);
    const auto& bk = plan_.buckets()[b];
    if (bk.size == 0) return;
    float* region = grad_region(b);
    if constexpr (Precision::is_mixed) {
      // 16-bit gradients on the wire, as on a GPU; accumulation stays fp32.
      compute_t* wire = state_.wire.data() + slot * plan_.max_bucket();
      for (std::size_t i = 0; i < bk.size; ++i) wire[i] = compute_t(region[i]);
      pending_[slot].req = dp_.reduce_scatter_async(std::span<const compute_t>(wire, bk.size),
                                                    std::span<compute_t>(state_.wire_out.data() + slot * plan_.max_piece(), bk.piece));
    } else {
      pending_[slot].req = dp_.reduce_scatter_async(std::span<const float>(region, bk.size),
                                                    std::span<float>(state_.reduced.data() + slot * plan_.max_piece(), bk.piece));
    }
  }

  // Waits for the slot's reduce-scatter and adds its piece into the fp32 grad shard.
  void finish_reduce(int slot) {
    auto& p = pending_[slot];
    if (!p.req) return;
    p.req->wait();
    p.req.reset();
    const auto& bk = plan_.buckets()[p.bucket];
    float* acc = state_.grad_shard.data() + bk.shard_offset;
    if constexpr (Precision::is_mixed) {
      const compute_t* in = state_.wire_out.data() + slot * plan_.max_piece();
      if (p.first) for (std::size_t i = 0; i < bk.piece; ++i) acc[i] = static_cast<float>(in[i]);
      else for (std::size_t i = 0; i < bk.piece; ++i) acc[i] += static_cast<float>(in[i]);
    } else {
      const float* in = state_.reduced.data() + slot * plan_.max_piece();
      if (p.first) std::copy_n(in, bk.piece, acc);
      else for (std::size_t i = 0; i < bk.piece; ++i) acc[i] += in[i];
    }
  }

  // ZeRO-3: makes bucket b's params live in its slot, and prefetches the next bucket in
  // the direction of travel so its all-gather overlaps this bucket's compute.
  void ensure_live(std::size_t b, bool forward) {
    const std::size_t nb = plan_.buckets().size();
    if (live_[b % 2].bucket != b || !live_[b % 2].valid) start_gather(b);
    if (live_[b % 2].req) {
      live_[b % 2].req->wait();
      live_[b % 2].req.reset();
      bind_live(b);
    }
    const std::size_t next = forward ? b + 1 : b - 1;
    if ((forward && next < nb) || (!forward && b > 0))
      if (live_[next % 2].bucket != next || !live_[next % 2].valid) start_gather(next);
  }

  void start_gather(std::size_t b) {
    auto& slot = live_[b % 2];
    if (slot.req) slot.req->wait();
    const auto& bk = plan_.buckets()[b];
    slot.bucket = b;
    slot.valid = true;
    float* dst = state_.live.data() + (b % 2) * plan_.max_bucket();
    if (bk.size == 0) {
      slot.req.reset();
      bind_live(b);
      return;
    }
    slot.req = dp_.all_gather_async(std::span<const float>(state_.params.data() + bk.shard_offset, bk.piece),
                                    std::span<float>(dst, bk.size));
  }

  void bind_live(std::size_t b) {
    const auto& bk = plan_.buckets()[b];
    float* base = state_.live.data() + (b % 2) * plan_.max_bucket();
    for (std::size_t l = bk.first_layer; l < bk.end_layer; ++l)
      for (std::size_t j = 0; j < table_[l].params.size(); ++j)
        table_[l].params[j]->data_ptr = base + (layer_param_offset_[layer_first_param_[l] + j] - bk.offset);
  }

  // ---- optimizer step ---------------------------------------------------------------
  void apply_update(float lr, float grad_scale, long opt_step) {
    if constexpr (stage == 0) {
      // Replicated: all-gather the reduced shards, then every rank updates everything.
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        dp_.all_gather(std::span<const float>(state_.grad_shard.data() + bk.shard_offset, bk.piece),
                       std::span<float>(state_.grads.data() + bk.offset, bk.size));
      }
      for (const auto& r : state_.runs) step_run(r, state_.grads.data(), lr, grad_scale, opt_step);
    } else {
      for (const auto& r : state_.runs) step_run(r, state_.grad_shard.data(), lr, grad_scale, opt_step);
    }
    refresh_params_from_master();
    std::fill(state_.grad_shard.begin(), state_.grad_shard.end(), 0.0f);
    if constexpr (stage == 3) live_[0].valid = live_[1].valid = false;
  }

  void step_run(const detail::update_run& r, const float* grads, float lr, float grad_scale, long opt_step) {
    shard_args<float, float> a{};
    a.master = state_.master.data() + r.begin;
    a.grad = grads + r.begin;
    a.state0 = Optimizer::state_slots > 0 ? state_.state0.data() + r.begin : nullptr;
    a.state1 = Optimizer::state_slots > 1 ? state_.state1.data() + r.begin : nullptr;
    a.param_out = nullptr;
    a.n = r.end - r.begin;
    opt_.step(a, lr, grad_scale, r.decay, opt_step);
  }

  // Compute params = master rounded to the compute precision; then stages 1-2 all-gather
  // the pieces so every rank holds the full params again.
  void refresh_params_from_master() {
    for (const auto& r : state_.runs) {
      const float* m = state_.master.data() + r.begin;
      float* p = state_.params.data() + r.out_begin;
      const std::size_t n = r.end - r.begin;
      if constexpr (Precision::is_mixed) {
        for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<float>(compute_t(m[i]));
      } else {
        std::copy_n(m, n, p);
      }
    }
    if constexpr (stage == 1 || stage == 2) {
      std::vector<request>& reqs = gather_reqs_;
      reqs.clear();
      for (const auto& bk : plan_.buckets()) {
        if (bk.size == 0) continue;
        float* region = state_.params.data() + bk.offset;
        reqs.push_back(dp_.all_gather_async(std::span<const float>(region + bk.piece * dp_.rank(), bk.piece),
                                            std::span<float>(region, bk.size)));
      }
      for (auto& r : reqs) r.wait();
      reqs.clear();
    }
  }

  // ---- loss scaling -----------------------------------------------------------------
  // fp16 uses the dynamic scaler; other precisions a static scale of 1, which still
  // turns a non-finite gradient into a skipped step.
  static loss_scaler make_loss_scaler(const trainer_options& o) {
    if constexpr (Precision::uses_loss_scaling) return loss_scaler(o.loss_scaler);
    loss_scaler_options fixed;
    fixed.loss_scale = 1.0f;
    return loss_scaler(fixed);
  }
  bool scaler_update(bool overflow) { return scaler_.update(overflow); }
  long skipped_count() const noexcept { return static_cast<long>(skipped_.size()); }

  std::size_t acts_bytes() const {
    std::size_t n = 0;
    for (auto& t : acts_) n += t.capacity() * sizeof(float);
    for (auto& t : dacts_) n += t.capacity() * sizeof(float);
    return n;
  }

  struct pending_reduce {
    std::optional<request> req;
    std::size_t bucket = 0;
    bool first = true;
  };
  struct live_slot {
    std::optional<request> req;
    std::size_t bucket = 0;
    bool valid = false;
  };

  grid_t& grid_;
  comm_t& dp_;
  Model model_;
  trainer_options opts_;
  Optimizer opt_;
  flat_layout layout_;
  bucket_plan plan_;
  std::vector<detail::layer_entry<ctx_t>> table_;
  detail::sharded_state<compute_t> state_;
  std::vector<std::size_t> param_offset_, layer_param_offset_, layer_first_param_;
  std::vector<param<float>*> all_params_;  // in layout order
  std::vector<tensor_t> acts_, dacts_;
  tensor_t mb_targets_;
  ctx_t ctx_;
  pending_reduce pending_[2];
  live_slot live_[2];
  std::vector<request> gather_reqs_;
  loss_scaler scaler_ = make_loss_scaler(opts_);
  long step_ = 0;
  std::vector<long> skipped_;
};

}  // namespace strata
