// What the trainer_*.cpp compile-fail tests share: the members of a layer that does no
// work, and a main that hands a model to strata::trainer (where the error must appear).
#pragma once
// What the tests use, not <strata/strata.hpp>: 13 compiles, a third less parsing each.
#include <strata/comm/environment.hpp>
#include <strata/comm/grid.hpp>
#include <strata/nn/linear.hpp>
#include <strata/nn/softmax_cross_entropy.hpp>
#include <strata/train/trainer.hpp>
#include <utility>

// A layer's cache, forward and backward, doing nothing: the test is about the fields.
#define NO_OP_LAYER_MEMBERS                                                                 \
  struct cache {};                                                                          \
  template <class Ctx>                                                                      \
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {} \
  template <class Ctx>                                                                      \
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}

template <class Model>
int train_model(Model model) {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<Model> tr(g, std::move(model));
  (void)tr;
  return 0;
}
template <class Model>
int train_model() {
  return train_model(Model{});
}
