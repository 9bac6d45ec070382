// A model that inherits its layers: an aggregate, but PFR cannot reflect bases.
// expect: strata: the model type has a base class, which Boost.PFR cannot reflect. Make the base a field
#include <strata/model/reflect.hpp>

struct dense {
  strata::param<float> weight;
};
struct backbone {
  dense a;
};
struct net : backbone {
  dense head;
};

int main() {
  net m{};
  strata::for_each_layer(m, [](auto&, std::string_view, std::size_t) {});
}
