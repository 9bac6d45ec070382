// A model given to the trainer whose layer is a class with private members.
// expect: strata: a layer type is not an aggregate Boost.PFR can reflect: it has a user-declared constructor, private
// or protected fields expect-first
#include "trainer_of.hpp"

class hidden_dense {
  strata::param<float> weight;

 public:
  NO_OP_LAYER_MEMBERS
};
struct net {
  hidden_dense fc;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
