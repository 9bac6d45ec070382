// Test support: how tests force a non-finite gradient. poison_layer passes its input
// through and, on one rank, writes poison_value into its weight's gradient at backward
// calls [poison_call, poison_call + poison_calls) (counted per process in
// backward_calls, one call per micro-batch); the examples/mlp model with it before its
// head is make_poisoned(shape). Set poison_rank back to -1 after the run.
#pragma once
#include <algorithm>
#include <atomic>
#include <limits>
#include <strata/strata.hpp>
#include <utility>
#include <vector>

#include "../../examples/mlp/model.hpp"

namespace test {

inline std::atomic<int> poison_rank{-1};
inline std::atomic<long> poison_call{-1};
inline std::atomic<long> poison_calls{1};  // how many backward calls from poison_call on
inline std::atomic<long> backward_calls{0};
inline float poison_value = std::numeric_limits<float>::infinity();

struct poison_layer {
  strata::param<float> w{strata::shape{1}, strata::init_spec::ones()};
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>& x, strata::tensor<float>& y, cache&) const {
    y.resize(x.shape());
    std::copy_n(x.data(), x.numel(), y.data());
  }
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>& dy, strata::tensor<float>& dx, cache&) {
    dx.resize(dy.shape());
    std::copy_n(dy.data(), dy.numel(), dx.data());
    const long call = backward_calls++;
    if (strata::environment().rank() == poison_rank && call >= poison_call && call < poison_call + poison_calls)
      w.grad()[0] = poison_value;
  }
};

struct poisoned_model {
  std::vector<mlp::hidden_block> blocks;
  poison_layer poison;
  strata::nn::linear head;
  strata::nn::softmax_cross_entropy loss;
};

inline poisoned_model make_poisoned(const mlp::shape_config& c) {
  auto m = mlp::make_model(c);
  return {std::move(m.blocks), {}, std::move(m.head), {}};
}

}  // namespace test
