// A struct nested inside a layer that inherits from another, in a model given to the trainer.
// expect: strata: a field inside a layer has a base class
// expect-first
#include "trainer_of.hpp"

struct projection {
  strata::param<float> weight;
};
struct gated_projection : projection {
  strata::param<float> gate;
};
struct mlp {
  gated_projection up;
  projection down;
  NO_OP_LAYER_MEMBERS
};
struct net {
  mlp block;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
