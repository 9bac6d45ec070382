// Non-blocking NCCL communicators: any NCCL call on one may return ncclInProgress while
// its work (an init's bootstrap, a split, a collective's first connection) goes on in
// NCCL's threads. Waiting for it here, with a deadline, is what lets a rank that never
// arrives be a comm_error instead of a hang inside ncclCommInitRank.
#pragma once
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <string_view>
#include <thread>

#include "time_out.hpp"

namespace strata::detail {

// STRATA_NCCL_BLOCKING=1 makes blocking communicators, NCCL's default, whose init and
// split wait without a time-out: for telling a fault of NCCL's non-blocking mode from
// one of strata's. NCCL's own NCCL_COMM_BLOCKING=1 overrides the config the same way.
inline bool nccl_blocking() {
  for (const char* name : {"STRATA_NCCL_BLOCKING", "NCCL_COMM_BLOCKING"})
    if (const char* v = std::getenv(name); v && std::string_view(v) == "1") return true;
  return false;
}

inline ncclConfig_t nccl_config() {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  c.blocking = nccl_blocking() ? 1 : 0;
  return c;
}

// The final result of a call on `comm` that returned `r`: while it is ncclInProgress,
// polls the communicator's state (ncclCommGetAsyncError) until that is settled or
// `deadline` passes; ncclInProgress then means it did not finish in time.
inline ncclResult_t nccl_settle(ncclComm_t comm, ncclResult_t r, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::microseconds(1);
  while (r == ncclInProgress && comm) {
    if (std::chrono::steady_clock::now() > deadline) return ncclInProgress;
    std::this_thread::sleep_for(pause);
    if (pause < std::chrono::milliseconds(1)) pause *= 2;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  return r;
}

}  // namespace strata::detail
