// The lane behind every host communicator, with a scripted executor: order, overlap of
// posted operations, errors that reach the right request, back-pressure and time-outs.
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>
#include <vector>

#include <strata/comm/detail/lane.hpp>
#include "catch.hpp"

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
  std::thread::id timed_out_on, ran_on;

  static bool overlaps(const task& t) { return t.posted; }
  bool start(const task& t, std::size_t) {
    {
      std::lock_guard lk(m);
      started.push_back(t.id);
      ran_on = std::this_thread::get_id();
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
    timed_out_on = std::this_thread::get_id();
    timed_out_id = t.id;
    ++timeouts;
    release[t.id] = true;  // a real executor aborts; this one lets the task finish
  }
  std::atomic<int> traced_count{0};
  void traced(const task&, std::uint64_t, std::int64_t start, std::int64_t end) {
    if (end >= start) ++traced_count;
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

TEST_CASE("an idle lane lets a blocking caller run its task itself, in order", "[lane][inline]") {
  exec e;
  lane l(e, 10s);
  REQUIRE(l.run_inline({0}));
  REQUIRE(e.ran_on == std::this_thread::get_id());

  // Something queued or in flight: the caller must queue too, behind it.
  strata::request posted(&l, l.submit({1, true}));
  REQUIRE_FALSE(l.run_inline({2}));
  e.release[1] = true;
  posted.wait();

  // Tasks submitted while a caller runs one start after it.
  REQUIRE(l.run_inline({3}));
  strata::request later;
  std::thread other([&] {
    while (e.started_copy().back() != 4) std::this_thread::yield();  // the caller is inside task 4
    later = strata::request(&l, l.submit({5}));
  });
  REQUIRE(l.run_inline({4, false, 100}));
  other.join();
  later.wait();
  const auto order = e.finished;
  REQUIRE(std::vector<int>(order.end() - 3, order.end()) == std::vector<int>{3, 4, 5});
  REQUIRE(e.ran_on != std::this_thread::get_id());  // 5 ran on the lane

  // An error reaches the caller, and the lane goes on.
  REQUIRE_THROWS_AS(l.run_inline({6, false, 0, true}), strata::comm_error);
  strata::request after(&l, l.submit({7}));
  after.wait();
  REQUIRE(e.finished.back() == 7);
}

TEST_CASE("the lane thread reports a task that a caller runs past the time-out", "[lane][inline]") {
  exec e;
  lane l(e, 10s);
  l.set_timeout(100ms);
  const auto t0 = clk::now();
  REQUIRE(l.run_inline({9, false, 400}));  // the caller is busy in it: only the lane can tell
  REQUIRE(clk::now() - t0 >= 400ms);
  REQUIRE(e.timeouts == 1);
  REQUIRE(e.timed_out_id == 9);
  REQUIRE(e.timed_out_on != std::this_thread::get_id());
}

TEST_CASE("a lane's history: the last 64 operations with collective sequence numbers and times", "[lane][history]") {
  exec e;
  {
    lane q(e, std::chrono::seconds(30));
    std::uint64_t last = 0;
    for (int i = 0; i < 70; ++i) {
      task t;
      t.id = i;
      t.posted = i % 10 == 3;  // a point-to-point task now and then
      e.release[i] = true;
      last = q.submit(t);
    }
    q.wait(last);
    std::vector<std::uint64_t> tickets, seqs;
    bool all_timed = true;
    const auto totals = q.history(
        [&](std::uint64_t ticket, std::uint64_t seq, const task& t, auto enq, const auto* started, const auto* ended) {
          tickets.push_back(ticket);
          seqs.push_back(seq);
          all_timed = all_timed && started && ended && *started >= enq && *ended >= *started &&
                      t.id == static_cast<int>(ticket) - 1;
        });
    REQUIRE(totals.submitted == 70);
    REQUIRE(totals.completed == 70);
    REQUIRE(totals.collectives == 63);  // 7 of the 70 are point-to-point
    REQUIRE(tickets.size() == 64);
    REQUIRE(tickets.front() == 7);
    REQUIRE(tickets.back() == 70);
    REQUIRE(all_timed);
    // ticket 7 is task 6, the 6th collective (tasks 0-2, 4-6); task 13 (ticket 14) is posted.
    REQUIRE(seqs.front() == 6);
    REQUIRE(seqs[14 - 7] == 0);
    REQUIRE(seqs.back() == 63);
    // Nothing is traced unless a trace session is on.
    REQUIRE(e.traced_count == 0);
  }
}
