// A class with private members nested inside a layer, in a model given to the trainer.
// expect: strata: a field inside a layer is a class Boost.PFR cannot reflect .*strata::opaque_field<T>
// expect-first
#include "trainer_of.hpp"

class rotary_table {
  float base_ = 10000.0f;

 public:
  float base() const { return base_; }
};
struct attention {
  strata::param<float> qkv;
  rotary_table rope;
  NO_OP_LAYER_MEMBERS
};
struct net {
  attention attn;
  strata::nn::softmax_cross_entropy loss;
};

int main() { return train_model<net>(); }
