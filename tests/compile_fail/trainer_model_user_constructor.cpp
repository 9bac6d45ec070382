// A model with a user-declared constructor, given to the trainer: the first error names
// the constructor (model/concepts.hpp), not a generic "not a model".
// expect: strata: the model type is not an aggregate Boost.PFR can reflect: it has a user-declared constructor
// expect-first
#include "trainer_of.hpp"

struct net {
  net() : fc{strata::param<float>({4, 3})} {}
  strata::nn::linear fc;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
