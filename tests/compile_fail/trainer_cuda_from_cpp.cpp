// A trainer in a space whose engine is not included (strata::cuda from a plain .cpp, or
// here a stand-in space) says which header brings it, before any other error.
// expect: include <strata/cuda.cuh> from a .cu translation unit
// expect-first
#include <cstdlib>
#include <strata/strata.hpp>

struct device_like {
  static constexpr bool host_accessible = false;
  static constexpr const char* name = "device_like";
  static void* allocate(std::size_t n) { return std::malloc(n); }
  static void deallocate(void* p, std::size_t) { std::free(p); }
  static void zero(void*, std::size_t) {}
};

struct model {
  strata::nn::linear head;
  strata::nn::softmax_cross_entropy loss;
};

int main() {
  strata::environment env;
  strata::grid g(env.world());
  strata::trainer<model, device_like> tr(g, model{});
  (void)tr;
}
