// A layer sharing a param by reference (tied weights must share by layout), in a model
// given to the trainer.
// expect: strata: a layer type has a reference or const field
// expect-first
#include <strata/strata.hpp>

struct tied_head {
  strata::param<float>& weight;
  strata::param<float> bias;
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};
struct net {
  strata::nn::linear fc;
  tied_head head;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{{}, {*new strata::param<float>, {}}, {}});
  (void)tr;
}
