// A const param inside a struct nested in a layer, in a model given to the trainer.
// expect: strata: a field inside a layer has a reference or const field
// expect-first
#include "trainer_of.hpp"

struct projection {
  const strata::param<float> weight;
  strata::param<float> bias;
};
struct mlp {
  projection up;
  projection down;
  NO_OP_LAYER_MEMBERS
};
struct net {
  mlp block;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
