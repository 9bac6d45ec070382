// A struct nested inside a layer that inherits from another, in a model given to the trainer.
// expect: strata: a field inside a layer has a base class
// expect-first
#include <strata/strata.hpp>

struct projection {
  strata::param<float> weight;
};
struct gated_projection : projection {
  strata::param<float> gate;
};
struct mlp {
  gated_projection up;
  projection down;
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};
struct net {
  mlp block;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{});
  (void)tr;
}
