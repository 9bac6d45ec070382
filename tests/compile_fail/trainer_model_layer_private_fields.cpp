// A model given to the trainer whose layer is a class with private members.
// expect: strata: a layer type is not an aggregate Boost.PFR can reflect: it has a user-declared constructor, private
// or protected fields expect-first
#include <strata/strata.hpp>

class hidden_dense {
  strata::param<float> weight;

 public:
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};
struct net {
  hidden_dense fc;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{});
  (void)tr;
}
