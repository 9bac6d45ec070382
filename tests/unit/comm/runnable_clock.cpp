// An NCCL operation's time-out counts only the time it could run (comm/detail/
// runnable_clock.hpp): not the collectives queued ahead of it, not the computation it
// waits for. Host-only, so it runs without a GPU.
#include <chrono>

#include <strata/comm/detail/runnable_clock.hpp>
#include "catch.hpp"

using namespace std::chrono_literals;
using strata::detail::runnable_clock;

namespace {
const runnable_clock::clock::time_point t0{};
bool yes() { return true; }
bool no() { return false; }
}  // namespace

TEST_CASE("the oldest operation's clock starts at the first poll that finds it runnable", "[comm][timeout]") {
  runnable_clock c;
  REQUIRE(c.runnable_for(1, yes, t0 + 1s) == 0s);
  REQUIRE(c.runnable_for(1, yes, t0 + 4s) == 3s);
  REQUIRE(c.runnable_for(1, yes, t0 + 301s) == 300s);
}

TEST_CASE("time spent queued behind earlier collectives does not count", "[comm][timeout]") {
  runnable_clock c;
  // Operations 1 and 2 were enqueued together; 1 takes 250 s (a slow, healthy gather).
  REQUIRE(c.runnable_for(1, yes, t0) == 0s);
  REQUIRE(c.runnable_for(1, yes, t0 + 250s) == 250s);
  // At 250 s operation 1 is done: 2 has been runnable for no time, not 250 s.
  REQUIRE(c.runnable_for(2, yes, t0 + 250s) == 0s);
  REQUIRE(c.runnable_for(2, yes, t0 + 260s) == 10s);
}

TEST_CASE("time waiting for the compute stream's work does not count", "[comm][timeout]") {
  runnable_clock c;
  REQUIRE(c.runnable_for(1, no, t0) == 0s);
  REQUIRE(c.runnable_for(1, no, t0 + 500s) == 0s);
  REQUIRE(c.runnable_for(1, yes, t0 + 600s) == 0s);
  REQUIRE(c.runnable_for(1, yes, t0 + 607s) == 7s);
}

TEST_CASE("once runnable, the inputs are not asked again and the clock does not restart", "[comm][timeout]") {
  runnable_clock c;
  int asked = 0;
  const auto done_once = [&] { return ++asked == 1; };  // true, then false: must not matter
  REQUIRE(c.runnable_for(3, done_once, t0 + 1s) == 0s);
  REQUIRE(c.runnable_for(3, done_once, t0 + 5s) == 4s);
  REQUIRE(c.runnable_for(3, done_once, t0 + 9s) == 8s);
  REQUIRE(asked == 1);
}

TEST_CASE("a late poll makes the time-out later, never earlier", "[comm][timeout]") {
  runnable_clock c;
  // The host did not poll while operation 1 ran; when it polls, 1 is done and 2 is the
  // oldest: 2's clock starts at this poll, whenever 1 actually finished.
  REQUIRE(c.runnable_for(2, yes, t0 + 1000s) == 0s);
  REQUIRE(c.runnable_for(2, yes, t0 + 1001s) == 1s);
}
