// A bare param as a top-level field of a model given to the trainer.
// expect: strata: every field of a model must be a layer .*Wrap a lone param or value in a struct
// expect-first
#include "trainer_of.hpp"

struct net {
  strata::nn::linear fc;
  strata::param<float> position_bias;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
