// A class with private members nested inside a layer (not a layer itself).
// expect: strata: a field inside a layer is a class Boost.PFR cannot reflect .*strata::opaque_field<T>
#include <strata/model/reflect.hpp>

class rotary_table {
  float base_ = 10000.0f;

 public:
  float base() const { return base_; }
};
struct attention {
  strata::param<float> qkv;
  rotary_table rope;
};

int main() {
  attention a{};
  strata::for_each_param(a, [](auto&, std::string_view) {});
}
