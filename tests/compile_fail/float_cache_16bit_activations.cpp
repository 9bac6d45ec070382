// A layer whose cache is one space's (float tensors) in a context that passes 16-bit
// activations (a mixed-precision GPU trainer's, here on the host) says how to declare
// its cache, instead of failing deep inside the layer's body.
// expect: declare `template <class Space, class Act = float> struct cache`
// expect-first
#include <strata/strata.hpp>

struct block {
  strata::nn::linear fc;
  strata::nn::relu act;
  template <class Space>
  struct cache {
    strata::nn::linear::cache<Space> fc;
    strata::nn::relu::cache<Space> act;
    strata::tensor<float, Space> h, dh;
  };
  template <class Ctx>
  void forward(Ctx& c, const strata::tensor_for<Ctx>& x, strata::tensor_for<Ctx>& y,
               cache<strata::space_of<Ctx>>& k) const {
    fc.forward(c, x, k.h, k.fc);
    act.forward(c, k.h, y, k.act);
  }
  template <class Ctx>
  void backward(Ctx& c, const strata::tensor_for<Ctx>& dy, strata::tensor_for<Ctx>& dx,
                cache<strata::space_of<Ctx>>& k) {
    act.backward(c, dy, k.dh, k.act);
    fc.backward(c, k.dh, dx, k.fc);
  }
};

struct model {
  block b;
};

int main() {
  model m;
  auto table = strata::detail::make_layer_table<strata::context<strata::host, strata::self_comm, strata::bf16>>(m, 1);
  (void)table;
}
