// A layer that inherits its params, in a model given to the trainer.
// expect: strata: a layer type has a base class, which Boost.PFR cannot reflect
// expect-first
#include <strata/strata.hpp>

struct weights {
  strata::param<float> weight;
};
struct dense : weights {
  strata::param<float> bias;
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};
struct net {
  dense fc;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{});
  (void)tr;
}
