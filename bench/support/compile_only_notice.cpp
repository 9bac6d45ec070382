// Linked into each benchmark of a STRATA_BENCH_COMPILE_ONLY build (scripts/test, where the
// benchmarks are only compiled and asked for --help): such a build is at -O0, so a run
// says so before anything else, and nobody reads its figures as strata's.
#include <cstdio>

namespace {
const bool noticed = [] {
  std::fputs(
      "note: this benchmark was built at -O0 only to check that it compiles (STRATA_BENCH_COMPILE_ONLY): "
      "its figures mean nothing; configure with -DSTRATA_BENCH_COMPILE_ONLY=OFF to measure\n",
      stderr);
  return true;
}();
}  // namespace
