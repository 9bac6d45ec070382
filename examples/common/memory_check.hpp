// --check-memory REPORT.json: holds a GPU run's measured device memory (its --report's
// memory_per_rank[].device) to its memory report by the rule of
// strata/space/device_memory.hpp, and says for every rank what passed or failed and by
// how much. scripts/gpu-check runs it on the Qwen2.5-0.5B run.
#pragma once
#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>
#include <strata/core/error.hpp>
#include <strata/space/device_memory.hpp>

namespace examples {

struct memory_check_result {
  bool ok = true;
  std::string text;  // a line per check of each rank, then the verdict
};

// A report that is not a device run's (no memory_per_rank, a host run, a rank without its
// device record) is a config_error saying so; `name` names the report in messages.
inline memory_check_result check_device_memory_report(const nlohmann::json& report, const std::string& name) {
  using strata::cat;
  using strata::config_error;
  strata::expects<config_error>(report.is_object() && report.contains("memory_per_rank") &&
                                    report.at("memory_per_rank").is_array() && !report.at("memory_per_rank").empty(),
                                [&] { return name + ": no memory_per_rank: not the --report of a strata example"; });
  const std::string device = report.value("device", std::string("?"));
  strata::expects<config_error>(device != "host", [&] {
    return name + ": a host run (device host) has no device memory to check; give the report of a --device cuda run";
  });
  constexpr double mib = 1 << 20;
  memory_check_result r;
  std::string failed;
  for (std::size_t k = 0; k < report.at("memory_per_rank").size(); ++k) {
    const auto& rank = report.at("memory_per_rank")[k];
    const std::string where = cat(name, ": memory_per_rank[", k, "]");
    strata::expects<config_error>(rank.is_object() && rank.contains("device"), [&] {
      return where + " has no \"device\" record (a run of a strata older than the device memory measure?)";
    });
    const auto m = strata::device_memory::from_json(rank.at("device"), where + ".device");
    bool ok = true;
    for (const auto& v : strata::check_device_memory(m)) {
      r.text += cat("rank ", k, ": ", v.text, "\n");
      ok = ok && v.ok;
    }
    char b[320];
    std::snprintf(b, sizeof b,
                  "rank %zu: allowance of the used growth: cuBLAS %.1f + comm %.1f + engine %.1f + %zu blocks x %.1f "
                  "+ first use %.1f MiB; unattributed %.1f MiB; context %s\n",
                  k, static_cast<double>(m.cublas) / mib, static_cast<double>(m.comms) / mib,
                  static_cast<double>(strata::device_allowance::engine) / mib, m.strata_blocks,
                  static_cast<double>(strata::device_allowance::page) / mib,
                  static_cast<double>(strata::device_allowance::first_use) / mib, m.unattributed() / mib,
                  m.context ? cat(static_cast<double>(*m.context) / mib, " MiB").c_str() : "not measured");
    r.text += b;
    if (!ok) failed += cat(failed.empty() ? "" : ", ", k);
    r.ok = r.ok && ok;
  }
  r.text += r.ok ? "device memory rule: every rank's measured growth is within 10 % of its report plus the allowance\n"
                 : cat("device memory rule FAILED on rank(s) ", failed,
                       ": a growth outside [0.9 x report, 1.1 x report + allowance]\n");
  return r;
}

// Reads and checks a report file: prints the lines, returns 0 when every rank passes and
// 1 when one fails. A missing or malformed file is a config_error.
inline int check_memory_file(const std::string& path) {
  std::ifstream in(path);
  strata::expects<strata::config_error>(static_cast<bool>(in),
                                        [&] { return "--check-memory " + path + ": cannot be read"; });
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  strata::expects<strata::config_error>(!j.is_discarded(), [&] { return "--check-memory " + path + ": not JSON"; });
  const memory_check_result r = check_device_memory_report(j, path);
  std::fputs(r.text.c_str(), r.ok ? stdout : stderr);
  return r.ok ? 0 : 1;
}

}  // namespace examples
