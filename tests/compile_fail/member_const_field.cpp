// A const param inside a nested struct: strata writes names and bindings into params.
// expect: strata: a field inside a layer has a reference or const field
#include <strata/model/reflect.hpp>

struct projection {
  const strata::param<float> weight;
  strata::param<float> bias;
};
struct mlp {
  projection up;
  projection down;
};

int main() {
  mlp m{};
  strata::for_each_param(m, [](auto&, std::string_view) {});
}
