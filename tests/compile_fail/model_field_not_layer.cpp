// A bare param as a top-level field of a model: fields of a model are layers.
// expect: strata: every field of a model must be a layer .*Wrap a lone param or value in a struct
#include <strata/model/layout.hpp>

struct dense {
  strata::param<float> weight;
};
struct net {
  dense body;
  strata::param<float> position_bias;
};

int main() {
  net m{};
  (void)strata::flat_layout::of(m);
}
