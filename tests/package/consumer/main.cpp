// Consumer of the installed strata package: a 2-process all_reduce through the
// umbrella header. Exits non-zero unless every rank sees the expected sum.
#include <cstdio>
#include <strata/strata.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  // The package's version is the header's.
  if (std::string(CONSUMER_FOUND_VERSION) != STRATA_VERSION_STRING) {
    std::printf("find_package found strata %s, the headers say %s\n", CONSUMER_FOUND_VERSION, STRATA_VERSION_STRING);
    return 1;
  }
  strata::environment env(argc, argv);
  auto& world = env.world();
  std::vector<float> v(1000, static_cast<float>(world.rank() + 1));
  world.all_reduce(std::span<float>(v));
  const float expected = static_cast<float>(world.size() * (world.size() + 1) / 2);
  int bad = 0;
  for (float x : v) bad += (x != expected);
  std::printf("rank %d of %d: all_reduce %s\n", world.rank(), world.size(), bad ? "WRONG" : "ok");
  return bad ? 1 : 0;
}
