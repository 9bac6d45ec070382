// A class with private members nested inside a layer, in a model given to the trainer.
// expect: strata: a field inside a layer is a class Boost.PFR cannot reflect .*strata::opaque_field<T>
// expect-first
#include <strata/strata.hpp>

class rotary_table {
  float base_ = 10000.0f;

 public:
  float base() const { return base_; }
};
struct attention {
  strata::param<float> qkv;
  rotary_table rope;
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};
struct net {
  attention attn;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{});
  (void)tr;
}
