// A struct nested inside a layer that inherits from another.
// expect: strata: a field inside a layer has a base class
#include <strata/model/reflect.hpp>

struct projection {
  strata::param<float> weight;
};
struct gated_projection : projection {
  strata::param<float> gate;
};
struct mlp {
  gated_projection up;
  projection down;
};

int main() {
  mlp m{};
  strata::assign_names(m);
}
