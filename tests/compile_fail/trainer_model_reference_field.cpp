// A model holding a layer by reference, given to the trainer.
// expect: strata: the model type has a reference or const field
// expect-first
#include "trainer_of.hpp"

struct net {
  strata::nn::linear& shared;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model(net{*new strata::nn::linear, {}}); }
