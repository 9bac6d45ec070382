// main() for multi-process tests: starts the world through strata::environment (MPI under
// mpiexec, Gloo under scripts/launch) and fails the test when any rank fails (MAX over ranks).
#include <cstdio>
#include <cstdlib>
#include <span>
#include <strata/comm/environment.hpp>

#include "catch_session.hpp"

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  // Every rank reports (Catch prints failures only), so a failure on rank 3 is visible.
  const int rank = env.rank();
  const int result = strata_test::run_catch_session(argc, argv);
  if (result != 0) {
    // Its peers may be waiting in a collective this rank will never join: it ends now, and
    // the launcher (mpiexec, scripts/launch) stops them, rather than meeting them below
    // once their communication time-out has fired.
    std::fflush(nullptr);
    std::_Exit(result);
  }
  int worst = result;
  env.world().all_reduce(std::span<int>(&worst, 1), strata::reduce_op::max);
  if (rank == 0 && worst != 0 && result == 0) std::printf("a test failed on another rank (see its output above)\n");
  return worst;
}
