// A consumer's program: a 2-process all_reduce, with the version the headers state.
#include <cstdio>
#include <strata/comm/environment.hpp>
#include <strata/version.hpp>
#include <vector>

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  auto& world = env.world();
  std::vector<double> v(16, world.rank() + 1.0);
  world.all_reduce(std::span<double>(v));
  const double expected = world.size() * (world.size() + 1) / 2.0;
  bool ok = true;
  for (double x : v) ok = ok && x == expected;
  if (world.rank() == 0) std::printf("strata %s: all_reduce %s\n", STRATA_VERSION_STRING, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
