// How long the oldest unfinished operation of an in-order queue (a communicator's stream)
// has been able to run, as the host's polls see it. An operation can run once the ones
// queued before it are done and so is the work it waits for (the compute stream's, at
// its enqueue). Its clock starts at the first poll that finds both, so neither a long
// queue ahead of it nor a long computation before it counts toward its time-out, and a
// host that polls late makes a time-out later, never earlier. Host-only: unit-tested
// without a GPU.
#pragma once
#include <chrono>
#include <cstdint>

namespace strata::detail {

class runnable_clock {
 public:
  using clock = std::chrono::steady_clock;

  // At a poll at `now`: `oldest` is the oldest unfinished operation's ticket, and
  // inputs_done() says whether the work it waits for is done (asked only until it is).
  // Returns how long that operation has been able to run; zero when it cannot yet.
  template <class InputsDone>
  clock::duration runnable_for(std::uint64_t oldest, InputsDone&& inputs_done, clock::time_point now) {
    if (oldest != ticket_) {
      ticket_ = oldest;
      runnable_ = false;
    }
    if (!runnable_ && inputs_done()) {
      runnable_ = true;
      since_ = now;
    }
    return runnable_ ? now - since_ : clock::duration::zero();
  }

 private:
  std::uint64_t ticket_ = 0;  // tickets start at 1
  bool runnable_ = false;
  clock::time_point since_{};
};

}  // namespace strata::detail
