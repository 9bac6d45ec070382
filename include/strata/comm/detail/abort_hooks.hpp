// What runs just before strata ends a job with MPI_Abort (a communication time-out, past
// every destructor): hooks a program registers, such as an MLflow run marking itself
// FAILED. Each runs once, in the aborting process, with its exceptions swallowed.
#pragma once
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "../../core/config.hpp"
#if STRATA_HAS_MPI
#include <mpi.h>
#endif

namespace strata::detail {

struct abort_hooks {
  std::mutex m;
  std::vector<std::pair<std::uint64_t, std::function<void()>>> hooks;
  std::uint64_t next = 0;
  static abort_hooks& get() {
    static abort_hooks h;
    return h;
  }
};

inline std::uint64_t add_abort_hook(std::function<void()> f) {
  auto& h = abort_hooks::get();
  std::lock_guard lock(h.m);
  h.hooks.emplace_back(++h.next, std::move(f));
  return h.next;
}

inline void remove_abort_hook(std::uint64_t id) {
  auto& h = abort_hooks::get();
  std::lock_guard lock(h.m);
  std::erase_if(h.hooks, [id](const auto& e) { return e.first == id; });
}

// Runs the hooks (each once), then MPI_Abort on the world, or exits with status 1.
[[noreturn, gnu::cold]] inline void abort_job() {
  std::vector<std::function<void()>> run;
  {
    auto& h = abort_hooks::get();
    std::lock_guard lock(h.m);
    for (auto& e : h.hooks) run.push_back(std::move(e.second));
    h.hooks.clear();
  }
  for (auto& f : run) {
    try {
      f();
    } catch (...) {  // the job ends either way
    }
  }
#if STRATA_HAS_MPI
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  if (initialised && !finalised) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
  // Without MPI (a job over Gloo, or one process) each rank ends itself: its peers see the
  // closed connections, or time out in turn.
  std::fflush(nullptr);
  std::_Exit(1);
}

}  // namespace strata::detail
