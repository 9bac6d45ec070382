// A model holding a layer by reference, given to the trainer.
// expect: strata: the model type has a reference or const field
// expect-first
#include <strata/strata.hpp>

struct net {
  strata::nn::linear& shared;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<net> tr(g, net{*new strata::nn::linear, {}});
  (void)tr;
}
