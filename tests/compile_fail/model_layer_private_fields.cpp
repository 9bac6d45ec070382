// A model whose field is a class with private members: that layer is not an aggregate.
// expect: strata: a layer type is not an aggregate Boost.PFR can reflect: it has a user-declared constructor, private
// or protected fields
#include <strata/model/reflect.hpp>

class hidden_dense {
  strata::param<float> weight;

 public:
  const strata::param<float>& w() const { return weight; }
};
struct dense {
  strata::param<float> weight;
};
struct net {
  dense first;
  hidden_dense second;
};

int main() {
  net m{};
  strata::for_each_layer(m, [](auto&, std::string_view, std::size_t) {});
}
