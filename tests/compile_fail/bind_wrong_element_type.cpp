// Binding param<float> to a double buffer.
// expect: strata: flat_layout::bind: the buffers' element type must be the params' value type
#include <strata/model/layout.hpp>

struct dense {
  strata::param<float> weight;
};
struct net {
  dense fc;
};

int main() {
  net m{};
  auto layout = strata::flat_layout::of(m);
  double data[64] = {};
  layout.bind(m, data, static_cast<double*>(nullptr));
}
