// main() for multi-process tests: initialises MPI through strata::environment and fails
// the test when any rank fails (MAX over ranks).
#include <mpi.h>

#include <cstdio>
#include <strata/comm/environment.hpp>

#include "catch_session.hpp"

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  // Every rank reports (Catch prints failures only), so a failure on rank 3 is visible.
  const int rank = env.rank();
  const int result = strata_test::run_catch_session(argc, argv);
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != 0 && result == 0) std::printf("a test failed on another rank (see its output above)\n");
  return worst;
}
