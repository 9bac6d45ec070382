// trainer<Model, Space, Sharding, Optimizer, Precision, Schedule>: trains a user's model
// on a tensor x data x pipeline grid, in the host space or on GPUs (strata::cuda, from a
// .cu file that includes <strata/cuda.cuh>). This is everything a program calls; the
// policies and the model are checked here, the work is detail::trainer_body's.
#pragma once
#include <cstddef>
#include <filesystem>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../comm/environment.hpp"
#include "../comm/grid.hpp"
#include "../io/checkpoint.hpp"
#include "../model/concepts.hpp"
#include "../model/layout.hpp"
#include "../optim/adamw.hpp"
#include "../parallel/bucket_plan.hpp"
#include "../parallel/pipeline.hpp"
#include "../parallel/policies.hpp"
#include "../parallel/precision.hpp"
#include "../space/device_memory.hpp"
#include "../space/host.hpp"
#include "batch.hpp"
#include "detail/engine.hpp"
#include "detail/trainer_body.hpp"
#include "options.hpp"
#include "report.hpp"

namespace strata {

namespace detail {
// Instantiating check_model<M>() is what reports a model that is not one, with
// concepts.hpp's message for what is wrong (a constructor, a base class, a reference
// field, a field that is not a layer...). Always true, so that no second, vaguer
// assertion follows the specific one.
template <class M>
consteval bool report_model_errors() {
  (void)strata::check_model<M>();
  return true;
}
}  // namespace detail

template <class Model, class Space = host, class Sharding = replicated, class Optimizer = adamw, class Precision = fp32,
          class Schedule = one_f_one_b>
class trainer {
  static_assert(detail::has_engine<Space>,
                "strata::trainer<Model, strata::cuda, ...>: the CUDA trainer's kernels are in CUDA headers: include "
                "<strata/cuda.cuh> from a .cu translation unit");
  static_assert(detail::report_model_errors<Model>());
  static_assert(sharding_policy<Sharding>,
                "strata::trainer: Sharding must be strata::replicated or strata::zero<S, ...>");
  static_assert(precision_policy<Precision>,
                "strata::trainer: Precision must be strata::fp32 or strata::mixed<bf16|fp16>");
  static_assert(pipeline_schedule<Schedule>, "strata::trainer: Schedule must be strata::gpipe or strata::one_f_one_b");
  static_assert(!(Sharding::offload && Sharding::stage == 0), "strata::trainer: offload_optimizer needs zero<1|2|3>");

  // On the host, zero<S> and zero<S, offload_optimizer> differ only in how memory is
  // reported, so they share one body (half the compile time of programs that dispatch
  // over both); off the host, offload keeps master and moments in offload_space<Space>.
  using body_t = detail::trainer_body<Model, Space, Sharding::stage, Sharding::offload && !std::is_same_v<Space, host>,
                                      Optimizer, Precision, Schedule>;

 public:
  using model_type = Model;
  using space_type = Space;
  using sharding = Sharding;
  using optimizer_type = Optimizer;
  using precision = Precision;
  using schedule = Schedule;
  using compute_t = typename Precision::compute_type;
  using comm_t = world_comm;
  using grid_t = grid<comm_t>;
  using ctx_t = typename body_t::ctx_t;  // the context the model's layers run with
  static constexpr int stage = Sharding::stage;

  // Lays out and plans this rank's share of the model (its pipeline stage's layers, its
  // piece of every bucket), allocates every buffer once, and initialises the weights
  // from opts.seed and each param's init_spec, the same for every grid. Collective over
  // the grid, which must outlive the trainer. Bad options are a config_error.
  trainer(grid_t& g, Model model, trainer_options opts = {}, Optimizer opt = {})
      : body_(g, std::move(model), std::move(opts), opt, Sharding::offload) {}

  // One optimizer step over this rank's rows of the global batch (collective): the
  // micro-batches run through the pipeline schedule, gradients are reduced bucket by
  // bucket, then the shards step, unless a gradient was not finite (the step is skipped
  // on every rank). The rows must split into options().micro_batches equal parts.
  step_stats step(const batch<Space>& b) { return body_.step(b); }
  // A device trainer also takes a batch in host memory, copied over first.
  template <class S>
  requires(!std::is_same_v<S, Space>)
  step_stats step(const batch<S>& b) {
    return body_.step(body_.staged(b));
  }

  // The mean loss of a batch under the current weights, without training (collective).
  float evaluate(const batch<Space>& b) { return body_.evaluate(b); }
  template <class S>
  requires(!std::is_same_v<S, Space>)
  float evaluate(const batch<S>& b) {
    return body_.evaluate(body_.staged(b));
  }

  // fp32 master weights of the whole model in parameter order, tensor-parallel slices
  // assembled and pipeline stages concatenated, unpadded (collective over the grid).
  // It holds the whole model on every rank: for tests and small models. Hashes and
  // exports stream with for_each_weight_piece.
  std::vector<float> gather_master() { return body_.gather_master(); }

  // The same values as gather_master, in pieces: f(std::size_t param_index, std::size_t
  // first, std::span<const float> values) for elements [first, first + values.size()) of
  // that param's full tensor, in order, on every rank (collective). A rank holds one piece
  // beyond its own state (at most 256 Ki elements: memory().bytes["io_staging"]).
  template <class F>
  void for_each_weight_piece(F&& f) {
    body_.for_each_weight_piece(f);
  }

  // Sets the weights from the whole model's full tensors in parameter order (as
  // gather_master() returns them): master and compute params of what this rank holds;
  // optimizer moments are left as they are. For initial weights from a file.
  void set_weights(std::span<const float> full) { body_.set_weights(full); }
  // Sets the weights from a reader of full tensors, each rank asking only for what it
  // holds: read(const param_slot& p, std::size_t first, std::span<float> out) fills out
  // with elements [first, first + out.size()) of p's full tensor (row-major, p.name as
  // in layout()). A tied param (param::tied_to) takes its source's values. Collective.
  // For weights from files of any size (models/qwen2_io.hpp reads Hugging Face ones).
  template <class Read>
  void set_weights_from(Read&& read) {
    body_.set_weights_from(read);
  }

  // A device trainer's device memory as measured (space/device_memory.hpp), not
  // collective: the device's used memory when the trainer was built (other processes and
  // this one's CUDA context) and the most it has used since (sampled after each step and
  // evaluation, and now), strata's allocator high-water mark since the trainer was built,
  // the bytes of the CUDA context, cuBLAS and the device communicators, each measured as
  // the used memory around its making, and the device part of memory().
  strata::device_memory device_memory()
  requires(!std::is_same_v<Space, host>)
  {
    return body_.device_memory();
  }

  // Writes a checkpoint of the current step under dir (collective); `extra` is kept
  // verbatim (a data position, say) and returned by load().
  void save(const std::filesystem::path& dir, nlohmann::json extra = nlohmann::json::object(),
            const checkpoint_options& o = {}) {
    body_.save(dir, std::move(extra), o);
  }

  // Loads a checkpoint saved at any tensor x data x pipeline layout and stage; training
  // continues from its step exactly as the saved run would have (collective).
  nlohmann::json load(const std::filesystem::path& dir) { return body_.load(dir); }

  // Bytes this rank holds per category, and which of them are host-offloaded (DESIGN §4).
  memory_report memory() const { return body_.memory(); }
  // Activation bytes held for in-flight micro-batches (grows to the schedule's peak).
  std::size_t activation_bytes() const { return body_.activation_bytes(); }
  // Where the last step's time went, when trainer_options::profile is set (empty before a
  // profiled step): train/step_profile.hpp.
  const step_profile& last_profile() const noexcept { return body_.last_profile(); }

  // The model's flat parameter layout, and this rank's bucket plan of it.
  const flat_layout& layout() const noexcept { return body_.layout(); }
  const bucket_plan& plan() const noexcept { return body_.plan(); }
  // The steps skipped for non-finite gradients, and the steps taken (skipped ones count).
  const std::vector<long>& skipped_steps() const noexcept { return body_.skipped_steps(); }
  long steps_done() const noexcept { return body_.steps_done(); }
  // The loss scale the next step uses (fp16's dynamic scale; 1 otherwise).
  float loss_scale() const noexcept { return body_.loss_scale(); }
  // The model, its params bound to this rank's buffers.
  Model& model() noexcept { return body_.model(); }
  grid_t& grid_ref() noexcept { return body_.grid_ref(); }
  const trainer_options& options() const noexcept { return body_.options(); }
  // This pipeline stage's layers [first, end) in model order.
  std::pair<std::size_t, std::size_t> stage_layers() const noexcept { return body_.stage_layers(); }

 private:
  body_t body_;
};

}  // namespace strata
