// The host twin of the device memory measure: strata's allocation counters (peak, live
// blocks, a restarted peak, many threads at once), the device record's arithmetic and
// its two serial forms, the rule (within 10 % of the report plus the allowance) with its
// boundaries and bad input, the check of a --report file, and the plan's device terms.
// No GPU: the CUDA space fills the same record (space/cuda_memory.hpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <strata/space/device_memory.hpp>
#include <strata/space/host.hpp>
#include <strata/train/memory_plan.hpp>
#include <strata/train/report.hpp>

#include "../../../examples/common/memory_check.hpp"
#include "catch.hpp"

namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

// A run that follows its report: 1,000 MiB reported, strata peaked at that, the device
// grew by it plus cuBLAS, the communicators, page rounding and some first-use code.
strata::device_memory healthy() {
  strata::device_memory m;
  m.total = 140000 * mib;
  m.start_used = 600 * mib;
  m.strata_start = 0;
  m.strata_peak = 1000 * mib;
  m.strata_blocks = 50;
  m.report = 1000 * mib;
  m.cublas = 32 * mib;
  m.comms = 4 * mib;
  m.context = 500 * mib;
  m.peak_used = m.start_used + 1000 * mib + 32 * mib + 4 * mib + 60 * mib;
  return m;
}

}  // namespace

TEST_CASE("space counters: live bytes and blocks, a peak that restarts from what is live") {
  strata::detail::space_counters c;
  c.add(100);
  c.add(50);
  CHECK(c.live == 150);
  CHECK(c.peak == 150);
  CHECK(c.blocks == 2);
  CHECK(c.allocations == 2);
  c.sub(100);
  CHECK(c.live == 50);
  CHECK(c.peak == 150);  // a high-water mark
  CHECK(c.blocks == 1);
  c.reset_peak();
  CHECK(c.peak == 50);  // a new phase starts from what is held
  c.add(20);
  CHECK(c.peak == 70);
  c.sub(20);
  c.sub(50);
  CHECK(c.live == 0);
  CHECK(c.blocks == 0);
  CHECK(c.allocations == 3);  // ever made
}

TEST_CASE("space counters: threads allocating at once lose no byte and no peak") {
  strata::detail::space_counters c;
  constexpr int threads = 8, rounds = 20000;
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&c, t] {
      const std::size_t n = static_cast<std::size_t>(t + 1) * 16;
      for (int i = 0; i < rounds; ++i) {
        c.add(n);
        c.sub(n);
      }
      c.add(n);  // each thread keeps one block
    });
  for (auto& t : ts) t.join();
  const std::size_t kept = 16 * threads * (threads + 1) / 2;
  CHECK(c.live == kept);
  CHECK(c.blocks == threads);
  CHECK(c.allocations == static_cast<std::size_t>(threads) * (rounds + 1));
  CHECK(c.peak >= kept);      // the end state was a peak at least once
  CHECK(c.peak <= 2 * kept);  // never more than every thread's two blocks at once
}

TEST_CASE("raise_to keeps the largest value any thread offered") {
  std::atomic<std::size_t> peak{0};
  std::vector<std::thread> ts;
  for (std::size_t t = 0; t < 8; ++t)
    ts.emplace_back([&peak, t] {
      for (std::size_t i = 0; i < 10000; ++i) strata::detail::raise_to(peak, (i * 8 + t) % 50000);
    });
  for (auto& t : ts) t.join();
  CHECK(peak == 49999);
  strata::detail::raise_to(peak, 3);
  CHECK(peak == 49999);  // never lowered
}

TEST_CASE("the device record: growths, what is left unattributed, and two round trips") {
  strata::device_memory m = healthy();
  CHECK(m.used_growth() == 1096 * mib);
  CHECK(m.strata_growth() == 1000 * mib);
  CHECK(m.unattributed() == static_cast<double>(60 * mib));
  // A start above the peak (another process freed memory meanwhile) is no growth.
  strata::device_memory shrunk = m;
  shrunk.peak_used = shrunk.start_used - mib;
  CHECK(shrunk.used_growth() == 0);
  CHECK(shrunk.unattributed() < 0);

  const auto v = strata::device_memory::from_values(m.values());
  CHECK(v.to_json() == m.to_json());
  const auto j = strata::device_memory::from_json(m.to_json(), "rank 0");
  CHECK(j.to_json() == m.to_json());
  CHECK(m.to_json().at("used_growth_bytes") == 1096 * mib);

  m.context.reset();  // not measured: -1 in the row, null in JSON
  CHECK(m.values()[7] == -1);
  CHECK(!strata::device_memory::from_values(m.values()).context);
  CHECK(m.to_json().at("context_bytes").is_null());
  CHECK(!strata::device_memory::from_json(m.to_json(), "x").context);
}

TEST_CASE("the device record: bad input is a config_error that names it") {
  auto j = healthy().to_json();
  j.erase("peak_used_bytes");
  CHECK_THROWS_WITH(strata::device_memory::from_json(j, "r.json: memory_per_rank[1].device"),
                    strata_test::contains_text("memory_per_rank[1].device: no \"peak_used_bytes\""));
  j = healthy().to_json();
  j["cublas_bytes"] = "32 MiB";
  CHECK_THROWS_WITH(strata::device_memory::from_json(j, "d"), strata_test::contains_text("d.cublas_bytes is"));
  j["cublas_bytes"] = -1;
  CHECK_THROWS_AS(strata::device_memory::from_json(j, "d"), strata::config_error);
  CHECK_THROWS_WITH(strata::device_memory::from_json(nlohmann::json::array(), "d"),
                    strata_test::contains_text("d: not a JSON object"));
  auto row = healthy().values();
  row[2] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH(strata::device_memory::from_values(row), strata_test::contains_text("value 2 is"));
  CHECK_THROWS_AS(strata::device_memory::from_values(std::vector<double>(3, 0.0)), strata::config_error);
}

TEST_CASE("the rule: within 10 % of the report plus the allowance, both ends included") {
  constexpr double r = 1000, a = 50;
  CHECK(strata::check_within("x", 1000, r, a).ok);
  CHECK(strata::check_within("x", 900, r, a).ok);           // 0.9 x report
  CHECK(strata::check_within("x", 1150, r, a).ok);          // 1.1 x report + allowance
  CHECK_FALSE(strata::check_within("x", 899.9, r, a).ok);   // the report overstates
  CHECK_FALSE(strata::check_within("x", 1150.1, r, a).ok);  // something is not in it
  CHECK(strata::check_within("x", 1200, r, a, 0.15).ok);    // another tolerance
  const auto v = strata::check_within("device used memory growth", 2000.0 * mib, 1000.0 * mib, 50.0 * mib);
  CHECK(v.high == Approx(1150.0 * mib));
  CHECK(v.low == Approx(900.0 * mib));
  CHECK_THAT(v.text, strata_test::contains_text("device used memory growth 2000.0 MiB is ABOVE"));
  CHECK_THAT(v.text, strata_test::contains_text("= [900.0, 1150.0] MiB"));
  CHECK_THAT(strata::check_within("s", 10.0 * mib, 1000.0 * mib, 0).text, strata_test::contains_text("is BELOW"));
  CHECK_THAT(strata::check_within("s", 1000.0 * mib, 1000.0 * mib, 0).text, strata_test::contains_text("is within"));
}

TEST_CASE("the rule: bad numbers are a config_error saying which") {
  CHECK_THROWS_WITH(strata::check_within("g", -1, 10, 0), strata_test::contains_text("g: the measured bytes is -1"));
  CHECK_THROWS_WITH(strata::check_within("g", 1, std::nan(""), 0), strata_test::contains_text("the report is"));
  CHECK_THROWS_WITH(strata::check_within("g", 1, 1, -5), strata_test::contains_text("the allowance is -5"));
  CHECK_THROWS_WITH(strata::check_within("g", 1, 1, 0, 1.0),
                    strata_test::contains_text("tolerance 1 is not in [0, 1)"));
}

TEST_CASE("a device run's two checks: strata's allocator and the device's used memory") {
  const strata::device_memory m = healthy();
  // cuBLAS + comm + engine + a page per block + first use.
  CHECK(strata::used_allowance(m) == (32 + 4 + 4 + 2 * 50 + 256) * mib);
  auto verdicts = strata::check_device_memory(m);
  REQUIRE(verdicts.size() == 2);
  CHECK(verdicts[0].ok);
  CHECK(verdicts[1].ok);

  // Device memory the report does not know of (a buffer allocated outside strata, say).
  strata::device_memory hidden = m;
  hidden.peak_used += 600 * mib;
  verdicts = strata::check_device_memory(hidden);
  CHECK(verdicts[0].ok);
  CHECK_FALSE(verdicts[1].ok);

  // A report that overstates what strata allocated.
  strata::device_memory over = m;
  over.report = 1200 * mib;
  CHECK_FALSE(strata::check_device_memory(over)[0].ok);

  // strata's own buffers beyond the report and the engine's allowance.
  strata::device_memory leak = m;
  leak.strata_peak = 1110 * mib;
  CHECK_FALSE(strata::check_device_memory(leak)[0].ok);
  leak.strata_start = 100 * mib;  // held before the trainer: not its growth
  CHECK(strata::check_device_memory(leak)[0].ok);
}

TEST_CASE("--check-memory: every rank's record held to the rule, bad reports named") {
  nlohmann::json report = {{"device", "cuda"}, {"memory_per_rank", nlohmann::json::array()}};
  report["memory_per_rank"].push_back({{"rank", 0}, {"device", healthy().to_json()}});
  auto r = examples::check_device_memory_report(report, "run.json");
  CHECK(r.ok);
  CHECK_THAT(r.text, strata_test::contains_text("rank 0: strata's allocator peak growth 1000.0 MiB is within"));
  CHECK_THAT(r.text, strata_test::contains_text("50 blocks x 2.0"));
  CHECK_THAT(r.text, strata_test::contains_text("context 500 MiB"));

  strata::device_memory bad = healthy();
  bad.peak_used += 2000 * mib;
  report["memory_per_rank"].push_back({{"rank", 1}, {"device", bad.to_json()}});
  r = examples::check_device_memory_report(report, "run.json");
  CHECK_FALSE(r.ok);
  CHECK_THAT(r.text, strata_test::contains_text("rank 1: device used memory growth 3096.0 MiB is ABOVE"));
  CHECK_THAT(r.text, strata_test::contains_text("FAILED on rank(s) 1"));

  report["memory_per_rank"][1].erase("device");
  CHECK_THROWS_WITH(examples::check_device_memory_report(report, "run.json"),
                    strata_test::contains_text("run.json: memory_per_rank[1] has no \"device\" record"));
  CHECK_THROWS_WITH(
      examples::check_device_memory_report({{"device", "host"}, {"memory_per_rank", {{{"rank", 0}}}}}, "cpu.json"),
      strata_test::contains_text("cpu.json: a host run"));
  CHECK_THROWS_WITH(examples::check_device_memory_report(nlohmann::json::object(), "x.json"),
                    strata_test::contains_text("x.json: no memory_per_rank"));
  CHECK_THROWS_WITH(examples::check_memory_file("/nonexistent/report.json"),
                    strata_test::contains_text("/nonexistent/report.json: cannot be read"));
}

TEST_CASE("a report's device part leaves out what lives in host memory") {
  strata::memory_report r;
  r.bytes = {{"params", 100}, {"master", 400}, {"activations", 50}, {"io_staging", 7}};
  r.offloaded = {{"params", false}, {"master", true}, {"activations", false}, {"io_staging", false}};
  CHECK(r.in_space(false) == 157);
  CHECK(r.device_bytes() == 150);  // io_staging is host memory in every space
  r.offloaded["io_staging"] = true;
  CHECK(r.device_bytes() == 150);
}

TEST_CASE("the plan's device terms: the measured context, cuBLAS and one-rank NCCL; NCCL's larger ones") {
  strata::plan_layout l;
  auto a = strata::plan_device_allowance(l);
  CHECK(a.context == 524 * mib);
  CHECK(a.cublas == 64 * mib);
  CHECK(a.comms == 2 * 484 * mib);  // data and tensor, one rank each
  CHECK(a.first_use == strata::device_allowance::first_use);
  CHECK(a.total() == (524 + 64 + 2 * 484 + 256) * mib);
  l.dp = 4;
  CHECK(strata::plan_device_allowance(l).comms == (484 + 512 + 484) * mib);
  l.pp = 2;  // and two pipeline links
  CHECK(strata::plan_device_allowance(l).comms == (3 * (484 + 512) + 484) * mib);
}
