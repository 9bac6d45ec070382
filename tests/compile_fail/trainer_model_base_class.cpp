// A model that inherits its layers, given to the trainer: the first error names the base.
// expect: strata: the model type has a base class, which Boost.PFR cannot reflect. Make the base a field
// expect-first
#include "trainer_of.hpp"

struct backbone {
  strata::nn::linear fc;
};
struct net : backbone {
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
