// A layer written for the host (tensor<float>, a plain cache) in a context of another
// space says it runs on the host only, instead of failing deep inside the layer table.
// expect: a layer written with tensor<float> runs on the host only
#include <cstdlib>
#include <strata/strata.hpp>

struct device_like {  // a memory space the host cannot read, as strata::cuda
  static constexpr bool host_accessible = false;
  static constexpr const char* name = "device_like";
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void deallocate(void* p, std::size_t) { std::free(p); }
  static void zero(void*, std::size_t) {}
};

struct host_only_layer {
  strata::param<float> w;
  struct cache {};
  template <class Ctx>
  void forward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) const {}
  template <class Ctx>
  void backward(Ctx&, const strata::tensor<float>&, strata::tensor<float>&, cache&) {}
};

struct model {
  host_only_layer a;
};

int main() {
  model m;
  auto table = strata::detail::make_layer_table<strata::context<device_like, strata::self_comm>>(m, 1);
  (void)table;
}
