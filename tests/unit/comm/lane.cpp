// The lane behind every host communicator, with a scripted executor: order, overlap of
// posted operations, errors that reach the right request, back-pressure and time-outs.
#include <atomic>
#include <cmath>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "catch.hpp"
#include <strata/comm/detail/lane.hpp>

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

namespace {

struct task {
  int id = 0;
  bool posted = false;  // completes when released, like an Isend/Irecv
  int sleep_ms = 0;
  bool fail = false;
};

struct exec {
  std::mutex m;
  std::vector<int> started;
  std::vector<int> finished;
  std::atomic<bool> release[256]{};
  std::atomic<int> timeouts{0};
  std::atomic<int> timed_out_id{-1};
  double timed_out_after = 0;

  static bool overlaps(const task& t) { return t.posted; }
  bool start(const task& t, std::size_t) {
    {
      std::lock_guard lk(m);
      started.push_back(t.id);
    }
    if (t.fail) throw strata::comm_error("task " + std::to_string(t.id) + " failed");
    if (t.sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(t.sleep_ms));
    return t.posted ? poll(t, 0) : finish(t);
  }
  bool poll(const task& t, std::size_t) { return release[t.id].load() && finish(t); }
  bool finish(const task& t) {
    std::lock_guard lk(m);
    finished.push_back(t.id);
    return true;
  }
  void timed_out(const task& t, double seconds) {
    timed_out_after = seconds;
    timed_out_id = t.id;
    ++timeouts;
    release[t.id] = true;  // a real executor aborts; this one lets the task finish
  }
  std::vector<int> started_copy() {
    std::lock_guard lk(m);
    return started;
  }
};

using lane = strata::detail::lane<task, exec>;

}  // namespace

TEST_CASE("a lane runs tasks in submission order, beyond its ring's capacity", "[lane]") {
  exec e;
  lane l(e, 10s);
  std::vector<strata::request> rs;
  const int n = 3 * static_cast<int>(lane::capacity) + 5;  // submitters wait for room
  for (int i = 0; i < n; ++i) rs.emplace_back(&l, l.submit({i}));
  rs.back().wait();
  for (auto& r : rs) REQUIRE(r.test());
  std::vector<int> want(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) want[static_cast<std::size_t>(i)] = i;
  REQUIRE(e.finished == want);
}

TEST_CASE("submitting returns while the task runs; waiting returns when it is done", "[lane]") {
  exec e;
  lane l(e, 10s);
  const auto t0 = clk::now();
  strata::request r(&l, l.submit({0, false, 200}));
  const auto submit_time = clk::now() - t0;
  REQUIRE(submit_time < 100ms);
  REQUIRE_FALSE(r.test());
  r.wait();
  REQUIRE(clk::now() - t0 >= 200ms);
  REQUIRE_FALSE(r.pending());
  {
    strata::request dropped(&l, l.submit({1, false, 50}));
  }  // the destructor waits: its buffers may not be released before the task is done
  REQUIRE(e.finished.back() == 1);
}

TEST_CASE("an error reaches the request of the task that raised it, once", "[lane]") {
  exec e;
  lane l(e, 10s);
  strata::request a(&l, l.submit({0}));
  strata::request b(&l, l.submit({1, false, 0, true}));
  strata::request c(&l, l.submit({2}));
  c.wait();
  a.wait();
  try {
    b.wait();
    FAIL("no error");
  } catch (const strata::comm_error& err) {
    REQUIRE(std::string(err.what()) == "task 1 failed");
  }
  b.wait();  // consumed: nothing left to rethrow
  REQUIRE(e.finished == std::vector<int>{0, 2});
}

TEST_CASE("posted tasks are in flight together; a collective waits for them", "[lane]") {
  exec e;
  lane l(e, 10s);
  strata::request recv(&l, l.submit({0, true}));
  strata::request send(&l, l.submit({1, true}));
  strata::request coll(&l, l.submit({2}));
  // Both posted tasks start without the first completing, as a ring exchange needs.
  for (int i = 0; i < 1000 && e.started_copy().size() < 2; ++i) std::this_thread::sleep_for(1ms);
  REQUIRE(e.started_copy() == std::vector<int>{0, 1});
  e.release[1] = true;
  std::this_thread::sleep_for(20ms);
  // Completion is published in order: the second is done but not visible before the first.
  REQUIRE_FALSE(send.test());
  REQUIRE(e.started_copy() == std::vector<int>{0, 1});
  e.release[0] = true;
  coll.wait();
  REQUIRE(recv.test());
  REQUIRE(send.test());
  REQUIRE(e.finished == std::vector<int>{1, 0, 2});
}

TEST_CASE("a task that runs past the time-out is reported by its waiter", "[lane]") {
  exec e;
  lane l(e, 10s);
  l.set_timeout(150ms);
  REQUIRE(l.timeout() == 150ms);
  strata::request quick(&l, l.submit({0}));
  quick.wait();
  const auto t0 = clk::now();
  strata::request stuck(&l, l.submit({7, true}));
  stuck.wait();
  const auto waited = clk::now() - t0;
  REQUIRE(e.timeouts == 1);
  REQUIRE(e.timed_out_id == 7);
  REQUIRE(std::abs(e.timed_out_after - 0.15) < 1e-9);  // the configured value, not a measurement
  REQUIRE(waited >= 150ms);
  REQUIRE(waited < 5s);
  REQUIRE_THROWS_AS(l.set_timeout(0s), strata::config_error);
}
