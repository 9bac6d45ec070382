// progress_log: the metrics file a run writes (a header line, then one JSON object per
// step with MFU and every rank's memory), and a clear error where it cannot be written.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <strata/comm/self.hpp>
#include <strata/observe/flops.hpp>
#include <strata/observe/progress.hpp>

#include "catch.hpp"

namespace {
std::filesystem::path temp_file(const std::string& name) {
  return std::filesystem::temp_directory_path() / ("strata-progress-" + std::to_string(::getpid()) + "-" + name);
}
}  // namespace

TEST_CASE("the metrics file has a header and one line per step, with MFU and each rank's memory") {
  strata::self_comm world;
  const auto path = temp_file("metrics.jsonl");
  strata::progress_options o;
  o.quiet = true;
  o.tokens_per_sample = 128;
  o.flops_per_sample = 128 * strata::train_flops_per_token(1e6, 2, 64, 128);
  o.peak_flops = 1e11;
  o.metrics_path = path.string();
  {
    strata::progress_log log(world, o, {{"layout", {{"dp", 1}}}});
    for (long k = 1; k <= 3; ++k) {
      strata::step_stats s;
      s.step = k;
      s.loss = 5.0f / static_cast<float>(k);
      s.seconds = 0.5;
      s.samples_per_s = 8;
      s.host_threads = 2;
      log.step(s, 3, std::size_t{3} << 20);
    }
  }
  std::ifstream f(path);
  std::string line;
  REQUIRE(std::getline(f, line));
  const auto header = nlohmann::json::parse(line);
  CHECK(header.at("header").at("layout").at("dp") == 1);
  long steps = 0;
  while (std::getline(f, line)) {
    const auto j = nlohmann::json::parse(line);
    ++steps;
    CHECK(j.at("step") == steps);
    CHECK(j.at("tokens_per_s").get<double>() == 8 * 128);
    // 8 samples/s of 128 tokens at 6 x 1e6 + 12 x 2 x 64 x 128 FLOPs a token, over 1e11.
    CHECK(std::abs(j.at("mfu").get<double>() - 8.0 * 128 * (6e6 + 12.0 * 2 * 64 * 128) / 1e11) < 1e-12);
    REQUIRE(j.at("ranks").size() == 1);
    CHECK(j.at("ranks")[0].at("memory_bytes").get<double>() == 3 << 20);
    CHECK(j.at("ranks")[0].at("peak_rss_bytes").get<double>() > 0);
  }
  CHECK(steps == 3);
  std::filesystem::remove(path);
}

TEST_CASE("a metrics file that cannot be written is a config_error naming it") {
  strata::self_comm world;
  strata::progress_options o;
  o.metrics_path = (temp_file("no-such-dir") / "m.jsonl").string();
  CHECK_THROWS_AS(strata::progress_log(world, o), strata::config_error);
  CHECK_THROWS_WITH(strata::progress_log(world, o), strata_test::contains_text("m.jsonl: cannot be written"));
}

TEST_CASE("the host's measured peak is a positive GEMM rate") { CHECK(strata::measure_host_peak_flops(128, 2) > 0); }

TEST_CASE("the summary: peak and report on the host; host and device side by side on a GPU") {
  using log = strata::progress_log<strata::self_comm>;
  constexpr double mib = 1 << 20;
  const std::string host = log::summary_table({3153.4 * mib, 10 * mib}, {41413.5 * mib, 20 * mib}, {{}, {}});
  CHECK(host ==
        "  rank   peak RSS MiB   reported MiB\n"
        "     0         3153.4        41413.5\n"
        "     1           10.0           20.0\n");

  strata::device_memory d;
  d.start_used = static_cast<std::size_t>(612 * mib);
  d.peak_used = static_cast<std::size_t>(42612 * mib);
  d.strata_peak = static_cast<std::size_t>(41400 * mib);
  d.report = static_cast<std::size_t>(41410 * mib);
  d.context = static_cast<std::size_t>(530 * mib);
  d.cublas = static_cast<std::size_t>(32 * mib);
  d.comms = static_cast<std::size_t>(2 * mib);
  const std::string gpu = log::summary_table({3153.4 * mib}, {41413.5 * mib}, {d});
  INFO(gpu);
  CHECK_THAT(gpu,
             strata_test::contains_text("peak RSS   report part   used start  used peak  strata peak  report part"));
  CHECK_THAT(gpu, strata_test::contains_text(
                      "     0     3153.4           3.5        612.0    42612.0      41400.0      41410.0"));
  CHECK_THAT(gpu, strata_test::contains_text("530.0   32.0    2.0\n"));
  d.context.reset();
  CHECK_THAT(log::summary_table({mib}, {mib}, {d}), strata_test::contains_text("       -   32.0    2.0\n"));
}

TEST_CASE("a GPU run's metrics file carries each rank's device record") {
  strata::self_comm world;
  const auto path = temp_file("device.jsonl");
  strata::progress_options o;
  o.quiet = true;
  o.metrics_path = path.string();
  strata::device_memory d;
  d.start_used = 100;
  d.peak_used = 300;
  d.report = 150;
  {
    strata::progress_log log(world, o);
    strata::step_stats s;
    s.step = 1;
    s.seconds = 1;
    log.step(s, 1, 200, d);
  }
  std::ifstream f(path);
  std::string line;
  REQUIRE(std::getline(f, line));  // the header
  REQUIRE(std::getline(f, line));
  const auto j = nlohmann::json::parse(line);
  CHECK(j.at("ranks")[0].at("device").at("used_growth_bytes") == 200);
  CHECK(j.at("ranks")[0].at("device").at("report_bytes") == 150);
  CHECK(j.at("ranks")[0].at("memory_bytes") == 200);
  std::filesystem::remove(path);
}
