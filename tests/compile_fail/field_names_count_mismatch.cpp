// Names declared on a type must name every field.
// expect: strata: the type's static field_names must name every field, in declaration order
#include <strata/model/reflect.hpp>

struct dense {
  strata::param<float> weight;
  strata::param<float> bias;
  static constexpr std::array<std::string_view, 1> field_names{"kernel"};
};

int main() {
  dense d{};
  strata::assign_names(d);
}
