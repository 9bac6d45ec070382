// detail::trainer_body: the body of strata::trainer (train/trainer.hpp has the public
// surface), written once for every space against detail::engine<Space>. It owns one part
// per concern, builds them in an order every rank repeats (their collectives included),
// and runs a step through them: the schedule, the global norm, the optimizer step.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../core/error.hpp"
#include "../../core/trace.hpp"
#include "../../io/checkpoint.hpp"
#include "../../model/layout.hpp"
#include "../../model/reflect.hpp"
#include "../../optim/clip.hpp"
#include "../../optim/loss_scaler.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../../space/device_memory.hpp"
#include "../../space/host_threads.hpp"
#include "../batch.hpp"
#include "../layer_table.hpp"
#include "../options.hpp"
#include "../report.hpp"
#include "../step_profile.hpp"
#include "checkpoint_view.hpp"
#include "grad_reducer.hpp"
#include "param_gathers.hpp"
#include "schedule_driver.hpp"
#include "shard_update.hpp"
#include "stage_params.hpp"
#include "tied_params.hpp"
#include "trainer_types.hpp"
#include "weights.hpp"

namespace strata::detail {

// Shared by the policies that compile to the same code: Stage and Offload are what the
// sharding policy changes (see trainer.hpp).
template <class Model, class Space, int Stage, bool Offload, class Optimizer, class Precision, class Schedule>
class trainer_body {
 public:
  using types = trainer_types<Space, Stage, Offload, Precision>;
  using grid_t = typename types::grid_t;
  using comm_t = typename types::comm_t;
  using ctx_t = typename types::ctx_t;
  static constexpr int stage = Stage;

  // Every rank runs these steps in this order: dev_.start makes the device communicators
  // (collective over data, then tensor), tied_.setup those of ties across stages,
  // initialise all-gathers ZeRO-1/2's params, and driver_.start splits the pipeline group
  // into its two links (with a device communicator each on a GPU).
  trainer_body(grid_t& g, Model model, trainer_options opts, Optimizer opt, bool offload)
      : grid_(g),
        dp_(g.data()),
        model_(std::move(model)),
        opts_(std::move(opts)),
        offload_(offload),
        reduce_(plan_, state_, dev_, params_),
        gathers_(plan_, state_, dev_, params_, dp_),
        update_(opt, plan_, state_, dev_, gathers_),
        driver_(g, opts_, table_, params_, plan_, dev_, reduce_, gathers_),
        tied_(g, layout_, params_, plan_, state_, dev_),
        weights_(g, layout_, params_, plan_, state_, dev_, gathers_, tied_),
        checkpoints_(g, layout_, params_, plan_, state_, dev_),
        counters_{0, {}, make_loss_scaler(opts_)} {
    opts_.validate();
    expects<config_error>(!opts_.offload_params || stage == 3, [&] {
      return cat(
          "strata::trainer: offload_params (zero_optimization.offload_param) needs ZeRO stage 3, as in "
          "DeepSpeed (this trainer is stage ",
          stage, ")");
    });
    // The optimizers round stochastically where asked, but the trainer's compute params
    // would need the same noise at every ZeRO stage, tied copy and resume: not done yet.
    expects<config_error>(!Precision::is_mixed || opts_.rounding == rounding::nearest_even, [] {
      return std::string(
          "strata::trainer: rounding = stochastic (the config's strata.rounding) is not supported by the trainer "
          "yet: its 16-bit compute params are rounded to nearest even; set rounding to nearest_even");
    });
    assign_names(model_);
    layout_ = flat_layout::of(model_);
    table_ = make_layer_table<ctx_t>(model_, static_cast<std::size_t>(opts_.micro_batches), opts_.recompute);
    params_.choose_layers(layout_, opts_.pipeline_cuts, grid_.pp_size(), grid_.pp_rank());
    plan_ = bucket_plan(layout_, dp_.size(), opts_.bucket_elems, params_.first_layer, params_.end_layer);
    dev_.template start<typename types::compute_t>(plan_.shard_size(), grid_.world(), dp_, grid_.tensor(),
                                                   driver_.ctx());
    // On the host the params already live in host memory: offload_params moves nothing.
    state_.allocate(plan_, stage, Optimizer::state_slots, Precision::is_mixed, dp_.rank(),
                    opts_.offload_params && !types::on_host);
    dev_.eng->prepare_step(state_.runs, state_.master.size());
    dev_.host_eng.prepare_step(state_.runs, state_.master.size());
    update_.prepare();
    driver_.allocate_losses();
    params_.collect(table_, layout_, plan_);
    tied_.setup(opts_.pipeline_cuts);
    gathers_.bind_static();
    weights_.initialise(opts_.seed);
    gathers_.reserve();
    driver_.start();
    collect_norm_runs();
  }

  // Queued device work reads buffers about to be freed: wait (with the time-out).
  ~trainer_body() {
    try {
      dev_.eng->synchronize();
    } catch (...) {  // a failed peer: its communicator was aborted
    }
  }
  trainer_body(const trainer_body&) = delete;
  trainer_body& operator=(const trainer_body&) = delete;

  step_stats step(const batch<Space>& b) {
    const auto t0 = std::chrono::steady_clock::now();
    if (opts_.profile) {
      if (!profiler_) profiler_.emplace(dev_.eng->marks());
      profiler_->begin();
    }
    struct stop_profile_on_throw {  // a step that throws leaves no hook on this thread
      std::optional<step_profiler<typename engine<Space>::marks_type>>& p;
      ~stop_profile_on_throw() {
        if (p && std::uncaught_exceptions() > 0) p->stop();
      }
    } stop_on_throw{profiler_};
    trace_scope ev(trace_track::compute, [&] { return cat("step ", counters_.step + 1); });
    check_batch_rows(b, opts_.micro_batches);
    const float scale = loss_scale();
    const std::size_t live = Space::counters().live.load();
    driver_.run(b, scale);
    // A bad id or target anywhere in the step is its layer's error here, before the
    // norm and the update (on a GPU the checks were only queued).
    dev_.eng->settle_id_checks();
    count_activations(live);
    tied_.sum_grads();

    step_stats s;
    s.step = ++counters_.step;
    s.loss = driver_.finish_loss();
    s.loss_scale = scale;
    // The schedule advances with the updates taken, as DeepSpeed's engine and Hugging
    // Face's Trainer step their schedulers only when the optimizer stepped: a skipped
    // step reports the rate it would have used, and the next step uses that rate again.
    s.lr = opts_.schedule.lr(counters_.step - 1 - static_cast<long>(counters_.skipped.size()));
    // One sum gives the global norm and the overflow verdict: a non-finite gradient on
    // any rank makes it non-finite everywhere.
    double sq = 0;
    {
      trace_scope norm(trace_track::compute, "gradient norm");
      sq = dev_.eng->sum_squares(state_.grad_shard.data(), norm_runs_);
      dp_.all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
      if (grid_.tp_size() > 1) grid_.tensor().all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
      if (grid_.pp_size() > 1) grid_.pipeline().all_reduce(std::span<double>(&sq, 1), reduce_op::sum);
    }
    const double unscale = 1.0 / (static_cast<double>(dp_.size()) * scale);
    s.grad_norm = std::sqrt(sq) * unscale;
    const bool overflow = !std::isfinite(sq) || !std::isfinite(s.loss);
    if (!counters_.scaler.update(overflow)) {
      s.skipped = true;
      s.nonfinite_param = first_nonfinite_param();  // before the gradients are zeroed
      counters_.skipped.push_back(s.step);
      dev_.eng->fill(state_.grad_shard.data(), state_.grad_shard.size(), 0.0f);
      check_skips_in_a_row(s);
    } else {
      const float coef = clip_coefficient(s.grad_norm, opts_.max_grad_norm);
      trace_scope opt(trace_track::optimizer, Optimizer::name);
      update_.apply(s.lr, static_cast<float>(coef * unscale),
                    counters_.step - static_cast<long>(counters_.skipped.size()));
    }
    if (profiler_ && opts_.profile) profiler_->finish();
    dev_.eng->synchronize();  // a step's time includes its device work
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (profiler_ && opts_.profile) last_profile_ = profiler_->resolve(s.seconds);
    s.idle_seconds = driver_.idle_seconds();
    s.samples_per_s = static_cast<double>(b.inputs.dim(0)) * dp_.size() / s.seconds;
    s.host_threads = host_threads().threads;
    sample_device_memory();
    return s;
  }

  float evaluate(const batch<Space>& b) {
    check_batch_rows(b, opts_.micro_batches);
    const std::size_t live = Space::counters().live.load();
    driver_.run_forward(b);
    dev_.eng->settle_id_checks();
    count_activations(live);
    const float loss = driver_.finish_loss();
    sample_device_memory();
    return loss;
  }

  // A batch in another space (host memory for a device trainer), copied over first.
  template <class S>
  const batch<Space>& staged(const batch<S>& b) {
    return dev_.stage(b);
  }

  std::vector<float> gather_master() { return weights_.gather(); }
  void for_each_weight_piece(weight_piece_fn f) { weights_.for_each_piece(f); }
  void set_weights(std::span<const float> full) { weights_.set(full); }
  void set_weights_from(weight_read_fn read) { weights_.set_from(read); }

  void save(const std::filesystem::path& dir, nlohmann::json extra, const checkpoint_options& o) {
    trace_scope ev(trace_track::checkpoint, [&] { return cat("save ", dir.string()); });
    checkpoints_.save(dir, std::move(extra), o, counters_, opts_.seed);
  }
  nlohmann::json load(const std::filesystem::path& dir) {
    trace_scope ev(trace_track::checkpoint, [&] { return cat("load ", dir.string()); });
    checkpoint_state st = checkpoints_.load(dir, counters_, opts_.seed);
    counters_.step = st.step;
    counters_.skipped = st.skipped;
    counters_.scaler.restore(st.scaler);
    update_.refresh_params_from_master();
    gathers_.invalidate();
    return st.extra;
  }

  memory_report memory() const { return state_.report(offload_, activation_bytes()); }
  // A device trainer's device memory as measured, beside its report's device part.
  strata::device_memory device_memory()
  requires(!types::on_host)
  {
    return dev_.eng->memory(memory().device_bytes());
  }
  // What the layers' outputs, caches and gradients hold (every schedule slot in use):
  // measured as the growth of the space's live bytes over the forward and backward passes,
  // which reuse their tensors once sized, so the count is the truth, whatever the layers.
  std::size_t activation_bytes() const { return activations_; }
  const step_profile& last_profile() const noexcept { return last_profile_; }
  const flat_layout& layout() const noexcept { return layout_; }
  const bucket_plan& plan() const noexcept { return plan_; }
  const std::vector<long>& skipped_steps() const noexcept { return counters_.skipped; }
  long steps_done() const noexcept { return counters_.step; }
  float loss_scale() const noexcept { return counters_.scaler.scale(); }
  Model& model() noexcept { return model_; }
  grid_t& grid_ref() noexcept { return grid_; }
  const trainer_options& options() const noexcept { return opts_; }
  std::pair<std::size_t, std::size_t> stage_layers() const noexcept { return {params_.first_layer, params_.end_layer}; }

 private:
  // At a static loss scale nothing would make the gradients finite again: after
  // max_consecutive_skips skipped steps in a row, the run stops saying why. Every rank
  // decides alike (the verdict is the all-reduced norm), so every rank throws here.
  void check_skips_in_a_row(const step_stats& s) const {
    const long limit = opts_.max_consecutive_skips;
    if (limit <= 0 || counters_.scaler.dynamic()) return;
    const auto& k = counters_.skipped;
    long run = 0;
    while (run < static_cast<long>(k.size()) && k[k.size() - 1 - static_cast<std::size_t>(run)] == s.step - run) ++run;
    if (run < limit) return;
    const bool loss_bad = !std::isfinite(s.loss);
    throw error(cat("step ", s.step, ": no update for ", run, " steps in a row (steps ", s.step - run + 1, "-", s.step,
                    "): the gradients were not finite (grad norm ", s.grad_norm, ", loss ", s.loss,
                    s.nonfinite_param.empty() ? std::string() : cat("; the first in ", s.nonfinite_param),
                    ") at the static loss scale ", s.loss_scale, " of ", Precision::name,
                    ", which cannot make them finite again. ",
                    loss_bad ? "The loss is not finite either, so the weights (or this data) no longer give finite "
                               "values. "
                             : "The loss is finite, so the backward pass overflows. ",
                    "Lower the lr (now ", s.lr,
                    "), add gradient clipping (gradient_clipping), check the data, or "
                    "resume from a checkpoint saved before step ",
                    s.step - run + 1, "; trainer_options::max_consecutive_skips (", limit,
                    "; 0: never stop) sets how many skips in a row end the run"));
  }

  // The first param, in layout order over every rank, whose gradient holds an inf or a
  // NaN: each rank checks its shard's piece of each of its params in turn (a squared sum
  // is finite exactly when every term is), and the smallest index over the groups wins.
  // Only on a skipped step, which every rank takes together, so the all-reduces match.
  std::string first_nonfinite_param() {
    const auto& ps = layout_.params();
    std::int64_t first = static_cast<std::int64_t>(ps.size());
    for (std::size_t i : params_.mine) {
      const auto runs = state_.shard_runs_inside(plan_, params_.offset[i], params_.offset[i] + ps[i].numel);
      if (!runs.empty() && !std::isfinite(dev_.eng->sum_squares(state_.grad_shard.data(), runs))) {
        first = static_cast<std::int64_t>(i);
        break;
      }
    }
    dp_.all_reduce(std::span<std::int64_t>(&first, 1), reduce_op::min);
    if (grid_.tp_size() > 1) grid_.tensor().all_reduce(std::span<std::int64_t>(&first, 1), reduce_op::min);
    if (grid_.pp_size() > 1) grid_.pipeline().all_reduce(std::span<std::int64_t>(&first, 1), reduce_op::min);
    return first < static_cast<std::int64_t>(ps.size()) ? ps[static_cast<std::size_t>(first)].name : std::string();
  }

  // After the step's or evaluation's device work: every buffer is sized and held.
  void sample_device_memory() {
    if constexpr (!types::on_host) dev_.eng->sample_memory();
  }

  void count_activations(std::size_t live_before) {
    const std::size_t now = Space::counters().live.load();
    if (now > live_before) activations_ += now - live_before;
  }

  // fp16 uses the dynamic scaler; other precisions a static scale of 1, which still
  // turns a non-finite gradient into a skipped step.
  static loss_scaler make_loss_scaler(const trainer_options& o) {
    if constexpr (Precision::uses_loss_scaling) return loss_scaler(o.loss_scaler);
    loss_scaler_options fixed;
    fixed.loss_scale = 1.0f;
    return loss_scaler(fixed);
  }

  // The grad shard's runs the global norm counts: all of it, but for params counted
  // elsewhere. Params replicated over tensor-parallel ranks (norms, row-parallel biases)
  // have equal gradients on every tensor rank: only tensor rank 0 counts them. A tied
  // copy carries its source's gradient: the source counts it.
  void collect_norm_runs() {
    std::vector<index_range> excluded = tied_.copy_ranges();  // padded ranges
    if (grid_.tp_size() > 1 && grid_.tp_rank() != 0)
      for (std::size_t i : params_.mine)
        if (!params_.all[i]->sharded())
          excluded.push_back({params_.offset[i], params_.offset[i] + layout_.params()[i].numel});
    if (excluded.empty()) {
      norm_runs_ = {{0, state_.grad_shard.size()}};
      return;
    }
    std::sort(excluded.begin(), excluded.end());
    norm_runs_ = state_.shard_runs_outside(plan_, excluded);
  }

  grid_t& grid_;
  comm_t& dp_;
  Model model_;
  trainer_options opts_;
  bool offload_ = false;  // reported only: on the host the state stays where it is
  flat_layout layout_;
  bucket_plan plan_;
  std::size_t activations_ = 0;
  std::vector<layer_entry<ctx_t>> table_;
  stage_params params_;
  typename types::dev_t dev_;
  typename types::state_t state_;
  grad_reducer<types> reduce_;
  param_gathers<types> gathers_;
  shard_update<types, Optimizer> update_;
  schedule_driver<types, Schedule> driver_;
  tied_params<types> tied_;
  trainer_weights<types> weights_;
  checkpoint_view<types, Optimizer> checkpoints_;
  std::vector<index_range> norm_runs_;                                         // of the grad shard, counted in the norm
  std::optional<step_profiler<typename engine<Space>::marks_type>> profiler_;  // trainer_options::profile
  step_profile last_profile_;
  step_counters counters_;
};

}  // namespace strata::detail
