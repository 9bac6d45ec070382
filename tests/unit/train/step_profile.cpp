// The step profile's bookkeeping, on a clock the test moves: each stretch of the timeline
// goes to the part whose scope was innermost then, nested scopes take their time out of
// the enclosing one, the parts add up to the timeline, and a trace scope or a wait on the
// profiled thread marks it whether or not a trace is on; on a device, the host's time
// splits into issuing the work and waiting for the device.
#include <chrono>
#include <strata/comm/request.hpp>
#include <strata/core/trace.hpp>
#include <strata/train/step_profile.hpp>
#include <string>
#include <thread>
#include <vector>

#include "catch.hpp"

namespace {

struct fake_marks {
  double* now;
  std::vector<double> at;
  void reset() { at.clear(); }
  void mark() { at.push_back(*now); }
  double seconds(std::size_t i, std::size_t j) const { return at[j] - at[i]; }
};

double part(const strata::step_profile& p, const std::string& name) {
  for (const auto& x : p.parts)
    if (x.name == name) return x.seconds;
  FAIL("no part named " << name);
  return -1;
}

}  // namespace

TEST_CASE("a scope's kind drops the index of a list's element") {
  using strata::detail::profile_kind;
  CHECK(profile_kind("compute", "layers.3 forward") == "layers forward");
  CHECK(profile_kind("compute", "blocks[12] backward") == "blocks backward");
  CHECK(profile_kind("compute", "model.layers.0.attn forward") == "model.layers.attn forward");
  CHECK(profile_kind("compute", "head forward") == "head forward");
  CHECK(profile_kind("compute", "fc2 forward") == "fc2 forward");  // digits inside a name stay
  CHECK(profile_kind("compute", "step 17") == "rest of the step");
  CHECK(profile_kind("optimizer", "adamw") == "optimizer");
  CHECK(profile_kind("wait", "waits") == "waits");
}

TEST_CASE("each stretch of the timeline goes to the innermost scope; the parts add up") {
  double now = 0;
  fake_marks marks{&now, {}};
  strata::detail::step_profiler<fake_marks> prof(marks);
  for (int round = 0; round < 2; ++round) {  // a second step starts afresh
    now = 0;
    prof.begin();
    now = 1;
    {
      strata::trace_scope fwd(strata::trace_track::compute, "layers.0 forward");
      now = 3;
      {
        strata::trace_scope inner(strata::trace_track::compute, "layers.1 forward");
        now = 3.5;
      }
      now = 4;
      {
        strata::request waited;  // complete: a wait of no time, still a mark
        waited.wait();
      }
      strata::detail::this_thread_profile()->enter("wait", "waits");
      now = 5;
      strata::detail::this_thread_profile()->leave();
      now = 6;
    }
    now = 7;
    {
      strata::trace_scope opt(strata::trace_track::optimizer, "adamw");
      now = 9;
    }
    now = 10;
    prof.finish();
    const strata::step_profile p = prof.resolve(10.5);
    CHECK(part(p, "rest of the step") == Approx(1 + 1 + 1));        // 0-1, 6-7, 9-10
    CHECK(part(p, "layers forward") == Approx(2 + 0.5 + 0.5 + 1));  // 1-3 and 3-3.5 (inner), 3.5-4, 5-6
    CHECK(part(p, "waits") == Approx(1));
    CHECK(part(p, "optimizer") == Approx(2));
    CHECK(p.timeline_seconds == Approx(10));
    CHECK(p.step_seconds == 10.5);
    CHECK(p.covered() == Approx(10 / 10.5));
    CHECK(p.parts.front().name == "rest of the step");
    // finish() took the hook off this thread: scopes no longer mark.
    CHECK(strata::detail::this_thread_profile() == nullptr);
  }
  const auto before = marks.at.size();
  { strata::trace_scope after(strata::trace_track::compute, "head forward"); }
  CHECK(marks.at.size() == before);
}

TEST_CASE("host communication's busy time is collected from every thread while profiling") {
  double now = 0;
  fake_marks marks{&now, {}};
  strata::detail::step_profiler<fake_marks> prof(marks);
  prof.begin();
  auto* sink = strata::detail::comm_busy_sink().load();
  REQUIRE(sink != nullptr);
  sink->add("all_gather", 0.25);
  sink->add("reduce_scatter", 0.5);
  sink->add("all_gather", 0.25);
  prof.finish();
  CHECK(strata::detail::comm_busy_sink().load() == nullptr);
  const auto p = prof.resolve(1);
  REQUIRE(p.comm.size() == 2);
  CHECK(p.comm[0].name == "all_gather");
  CHECK(p.comm[0].seconds == 0.5);
  CHECK(p.comm[1].name == "reduce_scatter");
  const std::string table = strata::profile_table(p);
  CHECK_THAT(table, strata_test::contains_text("comm all_gather"));
  CHECK_THAT(table, strata_test::contains_text("sum of the parts"));
}

TEST_CASE("on a device, the host's time splits into issuing the work and waiting for the device") {
  double now = 0;
  fake_marks marks{&now, {}};
  strata::detail::step_profiler<fake_marks> prof(marks);
  // A host step never waits for a device: no host lines in its table.
  prof.begin();
  now = 1;
  prof.finish();
  const auto host = prof.resolve(1);
  CHECK_FALSE(host.host_waited_for_device);
  CHECK(host.host_wait_seconds == 0);
  CHECK_THAT(strata::profile_table(host), !strata_test::contains_text("host waiting on the device"));

  // A device step: the waits the device streams report, on the host's clock; the rest of
  // the host's time from begin to finish is issuing. The waits here are reported, not
  // slept, so the host's span (a real sleep of 20 ms) holds both.
  const auto t0 = std::chrono::steady_clock::now();
  prof.begin();
  strata::detail::this_thread_profile()->waited_for_device(0.004);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  strata::detail::this_thread_profile()->waited_for_device(0.006);
  prof.finish();
  const double span = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  strata::detail::this_thread_profile() = nullptr;
  const auto dev = prof.resolve(span);
  CHECK(dev.host_waited_for_device);
  CHECK(dev.host_wait_seconds == Approx(0.010));
  CHECK(dev.host_issue_seconds >= 0.020 - 0.010);
  CHECK(dev.host_issue_seconds + dev.host_wait_seconds <= span);
  const std::string table = strata::profile_table(dev);
  CHECK_THAT(table, strata_test::contains_text("host issuing the work"));
  CHECK_THAT(table, strata_test::contains_text("host waiting on the device"));

  // After finish a wait is not the step's.
  prof.begin();
  prof.finish();
  prof.waited_for_device(1.0);
  CHECK(prof.resolve(1).host_wait_seconds == 0);
}
