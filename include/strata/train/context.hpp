// The context a trainer hands to every layer's forward and backward: the space the
// step runs in and its executor (stream, BLAS handle), the tensor-parallel communicator,
// and what the current micro-batch provides (its targets, for loss layers).
#pragma once
#include "../comm/environment.hpp"
#include "../core/error.hpp"
#include "../space/call_scratch.hpp"
#include "../space/tensor.hpp"

namespace strata {

// Compute: the element type the layers read their params as (nn::weights_of) and pass
// activations in (tensor_for): float, or the 16-bit compute type of a mixed-precision
// GPU trainer, which keeps no fp32 copy of its compute params and stores activations in
// 16 bits.
template <class Space, class Comm = world_comm, class Compute = float>
class context {
 public:
  using space_type = Space;
  using comm_type = Comm;
  using weight_type = Compute;
  using activation_type = Compute;

  // Targets of the micro-batch being computed: class ids as floats [B] for
  // cross-entropy, values [B, F] for mse.
  const tensor<float, Space>& targets() const {
    expects(targets_ != nullptr, "a loss layer ran without targets: the context has no current micro-batch");
    return *targets_;
  }
  void set_targets(const tensor<float, Space>* t) noexcept { targets_ = t; }
  // The tensor-parallel group (size 1 without tensor parallelism).
  Comm& tp() const {
    expects(tp_ != nullptr, "a tensor-parallel layer ran without a tensor-parallel communicator in its context");
    return *tp_;
  }
  void set_tp(Comm* c) noexcept { tp_ = c; }
  int micro_batch() const noexcept { return micro_batch_; }
  void set_micro_batch(int k) noexcept { micro_batch_ = k; }
  // The labels a loss layer's mean divides by in this micro-batch (the step's labels that
  // are not ignore_label, over micro-batches x data-parallel ranks), or -1: its rows.
  double label_count() const noexcept { return label_count_; }
  void set_label_count(double c) noexcept { label_count_ = c; }
  // Where the layer's work goes (empty on the host; stream and cuBLAS handle on a GPU).
  const executor<Space>& exec() const noexcept { return exec_; }
  void set_exec(const executor<Space>& e) noexcept { exec_ = e; }
  // Where the layers' id checks go to be read back once per step (a GPU trainer's), or
  // none: each check waits for the device.
  deferred_id_checks<Space>* id_checks() const noexcept { return id_checks_; }
  void set_id_checks(deferred_id_checks<Space>* c) noexcept { id_checks_ = c; }
  // The trainer's one set of call-scoped tensors per kind for all its layers
  // (call_scratch.hpp), or none: each cache's own.
  scratch_pool* scratch() const noexcept { return scratch_; }
  void set_scratch(scratch_pool* p) noexcept { scratch_ = p; }

 private:
  const tensor<float, Space>* targets_ = nullptr;
  Comm* tp_ = nullptr;
  int micro_batch_ = 0;
  double label_count_ = -1;
  executor<Space> exec_{};
  deferred_id_checks<Space>* id_checks_ = nullptr;
  scratch_pool* scratch_ = nullptr;
};

}  // namespace strata
