// A layer sharing a param by reference (tied weights must share by layout), in a model
// given to the trainer.
// expect: strata: a layer type has a reference or const field
// expect-first
#include "trainer_of.hpp"

struct tied_head {
  strata::param<float>& weight;
  strata::param<float> bias;
  NO_OP_LAYER_MEMBERS
};
struct net {
  strata::nn::linear fc;
  tied_head head;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model(net{{}, {*new strata::param<float>, {}}, {}}); }
