// A const param inside a struct nested in a layer, in a model given to the trainer.
// expect: strata: a field inside a layer has a reference or const field
// expect-first
#include <strata/strata.hpp>

struct projection {
  const strata::param<float> weight;
  strata::param<float> bias;
};
struct mlp {
  projection up;
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
