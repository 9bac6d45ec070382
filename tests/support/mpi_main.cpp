// main() for multi-process tests: starts the world through strata::environment (MPI under
// mpiexec, Gloo under scripts/launch) and fails the test when any rank fails (MAX over ranks).
#include <cstdio>
#include <span>
#include <strata/comm/environment.hpp>

#include "catch_session.hpp"

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  // Every rank reports (Catch prints failures only), so a failure on rank 3 is visible.
  const int rank = env.rank();
  const int result = strata_test::run_catch_session(argc, argv);
  int worst = result;
  env.world().all_reduce(std::span<int>(&worst, 1), strata::reduce_op::max);
  if (rank == 0 && worst != 0 && result == 0) std::printf("a test failed on another rank (see its output above)\n");
  return worst;
}
