// Runs a pipeline schedule's actions over this stage's layers: each micro-batch's rows
// (or its activations from the previous stage) forward through the layers into an
// activation slot, and gradients backward through the bucket reductions, with the
// tensors between stages sent and received; the last stage keeps each micro-batch's loss.
#pragma once
#include <cstddef>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

#include "../../comm/reduce_op.hpp"
#include "../../core/buffer.hpp"
#include "../../core/error.hpp"
#include "../../core/trace.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../../parallel/pipeline.hpp"
#include "../../space/call_scratch.hpp"
#include "../../space/ops.hpp"
#include "../batch.hpp"
#include "../layer_table.hpp"
#include "../options.hpp"
#include "grad_reducer.hpp"
#include "param_gathers.hpp"
#include "stage_io.hpp"
#include "stage_params.hpp"

namespace strata::detail {

template <class Types, class Schedule>
class schedule_driver {
  static constexpr int stage = Types::stage;
  using Space = typename Types::space_type;
  using comm_t = typename Types::comm_t;
  using ctx_t = typename Types::ctx_t;
  using tensor_t = tensor<float, Space>;
  using slot_t = typename layer_entry<ctx_t>::slot_t;

 public:
  schedule_driver(typename Types::grid_t& grid, const trainer_options& opts, std::vector<layer_entry<ctx_t>>& table,
                  const stage_params& params, const bucket_plan& plan, typename Types::dev_t& dev,
                  grad_reducer<Types>& reduce, param_gathers<Types>& gathers)
      : grid_(grid),
        opts_(opts),
        table_(table),
        params_(params),
        plan_(plan),
        dev_(dev),
        reduce_(reduce),
        gathers_(gathers) {
    ctx_.set_scratch(&scratch_);
  }

  // The context every layer runs with (its executor and tensor-parallel group are set
  // when the device side starts).
  ctx_t& ctx() noexcept { return ctx_; }

  // One loss value per micro-batch, on the device and its copy on the host.
  void allocate_losses() {
    loss_slots_ = buffer<float, Space>(static_cast<std::size_t>(opts_.micro_batches));
    loss_host_.resize(loss_slots_.size());
  }

  // Activation slots, the schedule's actions, and with pipeline stages one communicator
  // per direction (collective over the pipeline group; see stage_io.hpp).
  void start() {
    const std::size_t nl = params_.end_layer - params_.first_layer;
    acts_.resize(static_cast<std::size_t>(opts_.micro_batches));
    for (auto& slot : acts_) slot.resize(nl + 1);
    dacts_.resize(3);
    sends_.resize(static_cast<std::size_t>(opts_.micro_batches));
    slot_of_.assign(static_cast<std::size_t>(opts_.micro_batches), 0);
    actions_ = schedule_for<Schedule>(pp_rank(), pp_size(), opts_.micro_batches);
    if (pp_size() > 1) {
      pp_fwd_.emplace(grid_.pipeline().split(0, pp_rank()));
      pp_bwd_.emplace(grid_.pipeline().split(0, pp_rank()));
      if constexpr (!Types::on_host) {  // the data between stages moves on the device
        pp_fwd_dev_.emplace(dev_.eng->make_comm(*pp_fwd_, "pipeline_fwd"));
        pp_bwd_dev_.emplace(dev_.eng->make_comm(*pp_bwd_, "pipeline_bwd"));
      }
    }
  }

  // Forward and backward of every micro-batch in the schedule's order; gradients are
  // seeded with scale / micro-batches. Returns once every send has left.
  void run(const batch<Space>& b, float scale) {
    count_labels(b);
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
  }

  // Forward only, every micro-batch in slot 0.
  void run_forward(const batch<Space>& b) {
    count_labels(b);
    for (int m = 0; m < opts_.micro_batches; ++m) forward_micro_batch(b, m, 0);
    for (auto& s : sends_) s.wait();
  }

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
    grid_.data().all_reduce(std::span<float>(&loss, 1), reduce_op::avg);
    return loss;
  }

  // Seconds the last run() waited for neighbouring stages.
  double idle_seconds() const noexcept { return idle_; }

 private:
  int pp_rank() const { return grid_.pp_rank(); }
  // The communicators the tensors between stages travel on.
  auto& fwd_data() {
    if constexpr (Types::on_host)
      return *pp_fwd_;
    else
      return *pp_fwd_dev_;
  }
  auto& bwd_data() {
    if constexpr (Types::on_host)
      return *pp_bwd_;
    else
      return *pp_bwd_dev_;
  }
  int pp_size() const { return grid_.pp_size(); }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == pp_size() - 1; }

  // A loss over labels (cross-entropy) is the mean over the step's labels that are not
  // ignore_label, on every data-parallel rank and micro-batch together: each micro-batch
  // divides its sum by count / (micro-batches x dp), which the mean over micro-batches
  // and the gradient average over ranks then undo. Without ignored labels that is the
  // micro-batch's rows, as before; with them, uneven masks weigh every label the same.
  void count_labels(const batch<Space>& b) {
    if (!is_last_stage() || !table_[params_.end_layer - 1].counts_labels) return;
    const std::size_t n = b.targets.numel();
    const float* t = b.targets.data();
    if constexpr (!std::is_same_v<Space, host>) {
      labels_host_.resize(n);
      dev_.eng->download(labels_host_.data(), t, n);
      t = labels_host_.data();
    }
    double count = 0;
    for (std::size_t i = 0; i < n; ++i) count += t[i] != ignore_label ? 1.0 : 0.0;
    grid_.data().all_reduce(std::span<double>(&count, 1), reduce_op::sum);
    ctx_.set_label_count(count / (static_cast<double>(opts_.micro_batches) * grid_.dp_size()));
  }

  int next_free_slot(int taken) {
    if (in_use_.size() != acts_.size()) in_use_.assign(acts_.size(), false);
    if (taken >= 0) in_use_[static_cast<std::size_t>(taken)] = true;
    for (std::size_t i = 0; i < in_use_.size(); ++i)
      if (!in_use_[i]) return static_cast<int>(i);
    return 0;
  }

  void slice_rows(const tensor_t& src, int k, int K, tensor_t& dst) {
    shape s = src.shape();
    s[0] /= K;
    dst.resize(s);
    dev_.eng->copy(dst.data(), src.data() + static_cast<std::size_t>(k) * dst.numel(), dst.numel());
  }

  void forward_micro_batch(const batch<Space>& b, int m, int slot) {
    const std::size_t first = params_.first_layer, end = params_.end_layer;
    auto& acts = acts_[static_cast<std::size_t>(slot)];
    sends_[static_cast<std::size_t>(slot)].wait();  // the slot's output may still be on its way
    if (is_first_stage())
      slice_rows(b.inputs, m, opts_.micro_batches, slot_written<float>(acts[0]));
    else  // as this stage's first layer reads it (the previous stage sends that)
      write_slot_as(acts[0], table_[first].reads_float,
                    [&](auto& t) { idle_ += recv_tensor(*pp_fwd_, fwd_data(), t, pp_rank() - 1); });
    if (is_last_stage()) {
      slice_rows(b.targets, m, opts_.micro_batches, mb_targets_);
      ctx_.set_targets(&mb_targets_);
    }
    ctx_.set_micro_batch(m);
    for (std::size_t l = first; l < end; ++l) {
      if constexpr (stage == 3) gathers_.ensure_live(plan_.bucket_of_layer(l), true);
      trace_scope ev(trace_track::compute, [&] { return cat(table_[l].name, " forward"); });
      ev.arg("micro_batch", cat(m));
      table_[l].run_forward(ctx_, acts[l - first], acts[l - first + 1], static_cast<std::size_t>(slot));
    }
    if (is_last_stage()) {
      const tensor_t& loss = slot_read<float>(acts.back(), ctx_.exec());
      expects(loss.numel() == 1, [&] {
        return cat("strata::trainer: the model's last layer must be a loss layer producing one value; it produced ",
                   loss.shape().str());
      });
      dev_.eng->copy(loss_slots_.data() + m, loss.data(), 1);
    } else {
      read_slot_as(acts.back(), table_[end].reads_float, ctx_.exec(), [&](const auto& t) {
        send_tensor(*pp_fwd_, fwd_data(), t, pp_rank() + 1, sends_[static_cast<std::size_t>(slot)]);
      });
    }
  }

  void backward_micro_batch(int m, float dloss, bool first_backward) {
    const std::size_t first = params_.first_layer, end = params_.end_layer, nl = end - first;
    const int slot = slot_of_[static_cast<std::size_t>(m)];
    if (is_last_stage()) {
      tensor_t& seed = slot_written<float>(dact(nl));
      seed.resize(shape{1});
      dev_.eng->fill(seed.data(), 1, dloss);
    } else {  // as this stage's last layer wrote its output
      write_slot_as(dact(nl), table_[end - 1].writes_float,
                    [&](auto& t) { idle_ += recv_tensor(*pp_bwd_, bwd_data(), t, pp_rank() + 1); });
    }
    if (bwd_send_) bwd_send_->wait();  // dact(0) is about to be overwritten
    ctx_.set_micro_batch(m);
    const auto& buckets = plan_.buckets();
    for (std::size_t l = end; l-- > first;) {
      const std::size_t b = plan_.bucket_of_layer(l);
      if constexpr (stage == 3) gathers_.ensure_live(b, false);
      if (l + 1 == buckets[b].end_layer) reduce_.begin(b, first_backward);
      // A recomputed layer refills its scratch cache from its kept input; the output is
      // the one forward made, so it goes to a scratch tensor of its own.
      trace_scope ev(trace_track::compute, [&] { return cat(table_[l].name, " backward"); });
      ev.arg("micro_batch", cat(m));
      if (table_[l].recompute)
        table_[l].run_forward(ctx_, acts_[static_cast<std::size_t>(slot)][l - first], recomputed_,
                              static_cast<std::size_t>(slot));
      table_[l].run_backward(ctx_, dact(l - first + 1), dact(l - first), static_cast<std::size_t>(slot));
      if (l == buckets[b].first_layer) reduce_.launch(b);
    }
    reduce_.finish_all();
    if (!is_first_stage()) {
      if (!bwd_send_) bwd_send_.emplace();
      read_slot_as(dact(0), table_[first - 1].writes_float, ctx_.exec(),
                   [&](const auto& t) { send_tensor(*pp_bwd_, bwd_data(), t, pp_rank() - 1, *bwd_send_); });
    }
  }

  // The tensor of boundary b (0: the stage's input, nl: its output): boundaries 1 .. nl
  // alternate between two tensors, so a layer's dy and dx are never the same one.
  slot_t& dact(std::size_t b) { return dacts_[b == 0 ? 0 : 1 + b % 2]; }

  typename Types::grid_t& grid_;
  const trainer_options& opts_;
  std::vector<layer_entry<ctx_t>>& table_;
  const stage_params& params_;
  const bucket_plan& plan_;
  typename Types::dev_t& dev_;
  grad_reducer<Types>& reduce_;
  param_gathers<Types>& gathers_;
  ctx_t ctx_;
  scratch_pool scratch_;                   // the layers' call-scoped tensors, one set per kind (call_scratch.hpp)
  buffer<float, Space> loss_slots_;        // the last stage's loss per micro-batch
  std::vector<float> loss_host_;           // and its copy on the host
  std::vector<float> labels_host_;         // a device batch's targets, to count labels
  std::vector<std::vector<slot_t>> acts_;  // [slot][layer boundary]
  // The gradient at each layer boundary of the stage, in three tensors: a layer's output
  // gradient is dead once its backward made its input's, so the boundaries inside the
  // stage take turns in two, and boundary 0 (the gradient the stage sends back, still in
  // flight while the next micro-batch's arrives) has its own. See dact().
  std::vector<slot_t> dacts_;
  std::vector<pending_send> sends_;  // per slot: its output on the way forward
  std::optional<pending_send> bwd_send_;
  std::vector<int> slot_of_;
  std::vector<bool> in_use_;
  std::vector<pipeline_action> actions_;
  std::optional<comm_t> pp_fwd_, pp_bwd_;                              // shape headers (and on the host the data)
  std::optional<typename Types::dev_comm_t> pp_fwd_dev_, pp_bwd_dev_;  // the data, on a GPU
  tensor_t mb_targets_;
  slot_t recomputed_;  // a recomputed layer's output again (equal to the kept one)
  double idle_ = 0;
};

}  // namespace strata::detail
