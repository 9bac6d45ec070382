// A layer that inherits its params, in a model given to the trainer.
// expect: strata: a layer type has a base class, which Boost.PFR cannot reflect
// expect-first
#include "trainer_of.hpp"

struct weights {
  strata::param<float> weight;
};
struct dense : weights {
  strata::param<float> bias;
  NO_OP_LAYER_MEMBERS
};
struct net {
  dense fc;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
