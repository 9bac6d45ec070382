// environment: starts the job's world the way it was launched (comm/launch.hpp): MPI under
// an MPI launcher, Gloo for torchrun-, Ray-, Kubernetes- or Slurm-launched jobs without MPI,
// else one process; and gives the world communicator, rank, size and local rank. Instances
// share one reference-counted session.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>

#include "../core/config.hpp"
#include "../core/error.hpp"
#include "host_comm.hpp"
#include "launch.hpp"
#include "self.hpp"
#if STRATA_HAS_MPI
#include <mpi.h>

#include "detail/hang_watch.hpp"
#include "mpi.hpp"
#endif
#if STRATA_HAS_GLOO
#include "detail/lane.hpp"
#include "detail/rendezvous.hpp"
#include "gloo.hpp"
#endif

namespace strata {

using world_comm = host_comm;

namespace detail {

inline std::optional<int> env_int(const char* name) {
  const char* s = std::getenv(name);
  if (!s || !*s) return std::nullopt;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  expects<config_error>(*end == '\0' && v >= 0, cat(name, "=\"", s, "\" is not a non-negative integer"));
  return static_cast<int>(v);
}

struct env_session {
  std::mutex m;
  int refs = 0;
  bool owns_mpi = false;  // finalize only what we initialised
  int rank = 0, size = 1, local_rank = 0;
  launch_info launch;
  std::optional<world_comm> world;
#if STRATA_HAS_MPI
  std::optional<hang_watch> watch;  // answers hang reports (comm/detail/hang_watch.hpp)
#endif

  static env_session& get() {
    static env_session s;
    return s;
  }

#if STRATA_HAS_MPI
  static const char* thread_level(int t) {
    switch (t) {
      case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
      case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
      case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
      default: return "MPI_THREAD_MULTIPLE";
    }
  }
#endif

  void start(int* argc, char*** argv) {
    launch = detect_launch(STRATA_HAS_MPI != 0);
    if (launch.kind == launcher::mpi)
      start_mpi(argc, argv);
    else if (launch.size > 1)
      start_gloo();
    else
      world.emplace(self_comm("world"));
    rank = launch.rank;
    size = launch.size;
    local_rank = launch.local_rank;
    if (rank == 0 && launch.kind != launcher::single) {
      std::fprintf(
          stderr, "strata: launch %s (%s): %d processes over %s%s\n", std::string(name_of(launch.kind)).c_str(),
          launch.source.c_str(), size, std::string(world->backend()).c_str(),
          launch.master_addr.empty() ? "" : cat(", rendezvous ", launch.master_addr, ":", launch.master_port).c_str());
      std::fflush(stderr);
    }
  }

  void start_gloo() {
#if STRATA_HAS_GLOO
    world.emplace(gloo_comm::world(detail::rendezvous_config::of(launch)));
#else
    throw config_error(cat("strata::environment: a launch of ", launch.size, " processes by ", name_of(launch.kind),
                           " (", launch.source,
                           ") forms its world over Gloo, and strata was built without it; "
                           "install Gloo (Debian: libgloo-dev) and rebuild, or start the job with mpirun"));
#endif
  }

  void start_mpi(int* argc, char*** argv) {
#if STRATA_HAS_MPI
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    expects<comm_error>(!finalised, "strata::environment: MPI was already finalized; it cannot be started again");
    int provided = MPI_THREAD_SINGLE;
    if (!initialised) {
      // Without mpirun (STRATA_LAUNCHER=mpi) this starts a singleton: one process.
      STRATA_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
      owns_mpi = true;
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_MULTIPLE) {
      stop();
      throw comm_error(cat("strata::environment: MPI provides ", thread_level(provided),
                           ", strata needs MPI_THREAD_MULTIPLE (each communicator calls MPI from its own background "
                           "thread). Use an MPI built with thread support, and if your program initialises MPI "
                           "itself, call MPI_Init_thread with MPI_THREAD_MULTIPLE."));
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &launch.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &launch.size);
    if (auto l = env_int("OMPI_COMM_WORLD_LOCAL_RANK")) {
      launch.local_rank = *l;
    } else {  // other MPIs: the rank among processes that share memory with this one
      MPI_Comm node = MPI_COMM_NULL;
      STRATA_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, launch.rank, MPI_INFO_NULL, &node));
      MPI_Comm_rank(node, &launch.local_rank);
      MPI_Comm_free(&node);
    }
    try {
      world.emplace(mpi_comm(MPI_COMM_WORLD, "world"));
      watch.emplace();
    } catch (...) {
      stop();
      throw;
    }
#else
    (void)argc;
    (void)argv;
#endif
  }

  void stop() noexcept {
#if STRATA_HAS_MPI
    watch.reset();
#endif
    world.reset();
#if STRATA_HAS_MPI
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (owns_mpi && !finalised) MPI_Finalize();
    owns_mpi = false;
#endif
  }
};

}  // namespace detail

class environment {
 public:
  environment() { acquire(nullptr, nullptr); }
  // MPI may remove its own arguments from argv.
  environment(int& argc, char**& argv) { acquire(&argc, &argv); }
  template <class Int>
  requires std::is_same_v<Int, int>
  environment(Int argc, char** argv) {
    acquire(&argc, &argv);
  }
  environment(const environment&) = delete;
  environment& operator=(const environment&) = delete;
  // The last instance closes the world (and finalizes MPI, if strata initialised it).
  ~environment() {
    auto& s = detail::env_session::get();
    std::lock_guard lk(s.m);
    if (--s.refs == 0) s.stop();
  }

  int rank() const { return detail::env_session::get().rank; }
  int size() const { return detail::env_session::get().size; }
  // The index of this process among those on its node (which GPU to use, for instance).
  int local_rank() const { return detail::env_session::get().local_rank; }
  // How the job was launched, and by which variables (for a report).
  const launch_info& launch() const { return detail::env_session::get().launch; }
  world_comm& world() { return *detail::env_session::get().world; }

 private:
  static void acquire(int* argc, char*** argv) {
    auto& s = detail::env_session::get();
    std::lock_guard lk(s.m);
    if (s.refs == 0) s.start(argc, argv);
    ++s.refs;
  }
};

}  // namespace strata
