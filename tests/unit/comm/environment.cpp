// environment without a launcher: one process on a self_comm (MPI is not started); with
// STRATA_LAUNCHER=mpi, MPI starts as a singleton. Instances share one reference-counted
// session and one world communicator, and the world works.
#include <cstdlib>
#include <span>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/comm/environment.hpp>
#include "catch.hpp"

static_assert(strata::communicator<strata::world_comm>);

// One test case: MPI cannot start again in a process once the last instance finalized it.
TEST_CASE("environment without mpirun, nested instances, and the world communicator", "[environment]") {
  ::unsetenv("STRATA_LAUNCHER");
  {
    strata::environment alone;
    REQUIRE(alone.launch().kind == strata::launcher::single);
    REQUIRE(alone.world().backend() == "self");
    REQUIRE(alone.world().size() == 1);
#if STRATA_HAS_MPI
    int initialised = 1;
    MPI_Initialized(&initialised);
    REQUIRE(initialised == 0);  // one process needs no MPI
#endif
  }
#if STRATA_HAS_MPI
  ::setenv("STRATA_LAUNCHER", "mpi", 1);
#endif
  {
    strata::environment outer;
    REQUIRE(outer.size() == 1);
    REQUIRE(outer.rank() == 0);
    REQUIRE(outer.local_rank() == 0);
    auto& w = outer.world();
    REQUIRE(w.size() == 1);
    REQUIRE(w.rank() == 0);
    REQUIRE(w.name() == "world");
    REQUIRE(w.backend() == (STRATA_HAS_MPI ? "mpi" : "self"));
    {
      int argc = 1;
      char arg0[] = "unit_comm_environment";
      char* args[] = {arg0, nullptr};
      char** argv = args;
      strata::environment inner(argc, argv);  // shares the session: no second MPI_Init
      REQUIRE(&inner.world() == &w);
      strata::environment by_value(1, argv);
      REQUIRE(&by_value.world() == &w);
    }
    // Still usable after the inner instances are gone.
    std::vector<double> x{2.5, -1.0};
    w.all_reduce(std::span(x), strata::reduce_op::avg);
    REQUIRE(x == std::vector<double>{2.5, -1.0});
    auto sub = w.split(0, 0);
    REQUIRE(sub.size() == 1);
#if STRATA_HAS_MPI
    int initialised = 0;
    MPI_Initialized(&initialised);
    REQUIRE(initialised == 1);
#endif
  }
#if STRATA_HAS_MPI
  // The last instance finalized MPI, because it was the one that started it.
  int finalised = 0;
  MPI_Finalized(&finalised);
  REQUIRE(finalised == 1);
  REQUIRE_THROWS_AS(strata::environment(), strata::comm_error);
#endif
}
