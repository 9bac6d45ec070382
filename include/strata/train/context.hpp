// The context a trainer hands to every layer's forward and backward: the space the
// step runs in and what the current micro-batch provides (its targets, for loss layers).
#pragma once
#include "../core/error.hpp"
#include "../space/tensor.hpp"

namespace strata {

template <class Space>
class context {
 public:
  using space_type = Space;

  // Targets of the micro-batch being computed: class ids as floats [B] for
  // cross-entropy, values [B, F] for mse.
  const tensor<float, Space>& targets() const {
    expects(targets_ != nullptr, "a loss layer ran without targets: the context has no current micro-batch");
    return *targets_;
  }
  void set_targets(const tensor<float, Space>* t) noexcept { targets_ = t; }
  int micro_batch() const noexcept { return micro_batch_; }
  void set_micro_batch(int k) noexcept { micro_batch_ = k; }

 private:
  const tensor<float, Space>* targets_ = nullptr;
  int micro_batch_ = 0;
};

}  // namespace strata
