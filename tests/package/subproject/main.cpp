// A consumer's program: what strata::strata must carry to it — include paths, MPI, the
// BLAS and OpenMP — in few headers, so each way in costs seconds to build. (The full
// umbrella header and strata's own communicator are the find_package consumer's.)
#include <mpi.h>

#include <cstdio>
#include <strata/space/host_threads.hpp>
#include <strata/version.hpp>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  double sum = rank + 1.0;
  MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  const auto& threads = strata::host_threads();  // OpenMP and the BLAS, configured
  const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
  float c[4] = {};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  const bool ok = sum == size * (size + 1) / 2.0 && c[0] == 1 && c[3] == 4 && threads.threads >= 1;
  if (rank == 0)
    std::printf("strata %s: all_reduce and sgemm %s (%d threads)\n", STRATA_VERSION_STRING, ok ? "ok" : "WRONG",
                threads.threads);
  MPI_Finalize();
  return ok ? 0 : 1;
}
