// A layer that inherits its params from another struct.
// expect: strata: a layer type has a base class, which Boost.PFR cannot reflect
#include <strata/model/reflect.hpp>

struct weights {
  strata::param<float> weight;
};
struct dense : weights {
  strata::param<float> bias;
};

int main() {
  dense d{};
  strata::for_each_param(d, [](auto&, std::string_view) {});
}
