// Names declared on a type must be distinct identifiers, or two params would share a name.
// expect: strata: the type's static field_names must be distinct identifiers
#include <strata/model/reflect.hpp>

struct dense {
  strata::param<float> weight;
  strata::param<float> bias;
  static constexpr std::array<std::string_view, 2> field_names{"w", "w"};
};

int main() {
  dense d{};
  strata::assign_names(d);
}
