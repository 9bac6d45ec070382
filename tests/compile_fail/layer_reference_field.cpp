// A layer that shares a param by reference (tied embeddings must share by layout, not by reference).
// expect: strata: a layer type has a reference or const field
#include <strata/model/layout.hpp>

struct embedding {
  strata::param<float> weight;
  strata::param<float> unused;
};
struct tied_head {
  strata::param<float>& weight;
  strata::param<float> bias;
};
struct net {
  embedding embed;
  tied_head head;
};

int main() {
  net m{{}, {*new strata::param<float>, {}}};
  (void)strata::flat_layout::of(m);
}
