// A model with a user-declared constructor is not an aggregate: Boost.PFR cannot
// reflect it, and strata says so instead of failing deep inside PFR.
// expect: strata: the model type is not an aggregate Boost.PFR can reflect: it has a user-declared constructor
#include <strata/model/layout.hpp>

struct dense {
  strata::param<float> weight;
};
struct net {
  net() : fc{strata::param<float>({4, 3})} {}
  dense fc;
};

int main() {
  net m;
  auto layout = strata::flat_layout::of(m);
  return static_cast<int>(layout.total());
}
