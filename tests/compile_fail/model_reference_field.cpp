// A model holding a layer by reference.
// expect: strata: the model type has a reference or const field
#include <strata/model/layout.hpp>

struct dense {
  strata::param<float> weight;
};
struct net {
  dense& shared;
  dense head;
};

int main() {
  dense d;
  net m{d, {}};
  (void)strata::flat_layout::of(m);
}
