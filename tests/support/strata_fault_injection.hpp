// Test-only fault injection for io/checkpoint.hpp, compiled in only where a target defines
// STRATA_TEST_FAULT_INJECTION (tests/CMakeLists.txt: the mlp build for checkpoint_kill.sh).
#pragma once
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <strata/io/detail/files.hpp>

namespace strata::test {

// STRATA_FAULT_KILL_IN_SAVE="rank:step" kills that rank (SIGKILL, no clean-up) halfway
// through writing its shard of that step, to prove an interrupted save loses nothing.
// What was written so far is synced first, as a crash could leave it on disk.
inline void kill_in_save(int rank, long step, strata::detail::posix_file& f) {
  const char* v = std::getenv("STRATA_FAULT_KILL_IN_SAVE");
  if (!v) return;
  int r = -1;
  long s = -1;
  if (std::sscanf(v, "%d:%ld", &r, &s) != 2 || r != rank || s != step) return;
  f.sync();
  std::raise(SIGKILL);
}

}  // namespace strata::test
