// A device trainer's memory as measured on its GPU, next to its report, and the rule that
// holds one to the other (as tests/mpi/memory.cpp holds the host's resident peak to it):
// the measured growth within 10 % of the report plus a stated allowance. Plain numbers
// and arithmetic, no CUDA: the CUDA space fills the record (space/cuda_memory.hpp), the
// progress summary, the examples' reports and `qwen2 --check-memory` read it, and the
// unit tests check the arithmetic without a GPU.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"

namespace strata {

// One rank's device, in bytes. "used" is the driver's count for the whole device
// (cudaMemGetInfo: total - free), so it includes other processes and this one's CUDA
// context; "strata" is strata's own allocator (cuda::counters(): every cudaMalloc and
// stream-ordered scratch of buffers, tensors and the trainer's engine).
struct device_memory {
  std::size_t total = 0;          // the device's memory as CUDA counts it
  std::size_t start_used = 0;     // used when the trainer started: other processes, this context
  std::size_t peak_used = 0;      // the most used seen since (after each step, and when read)
  std::size_t strata_start = 0;   // strata's live device bytes when the trainer started
  std::size_t strata_peak = 0;    // strata's high-water mark since then
  std::size_t strata_blocks = 0;  // the most live strata allocations seen (each rounded to a page at most)
  std::size_t report = 0;         // the trainer's memory report, the part on the device
  // Named, each measured as the change of used memory around it: this process's CUDA
  // context (before and after select_device made it, through NVML; empty where it was
  // not measured), the engine's cublasCreate, and the making of its communicators.
  std::optional<std::size_t> context;
  std::size_t cublas = 0, comms = 0;

  std::size_t used_growth() const noexcept { return peak_used > start_used ? peak_used - start_used : 0; }
  std::size_t strata_growth() const noexcept { return strata_peak > strata_start ? strata_peak - strata_start : 0; }
  // What the used growth holds beyond strata's allocations and the named allowances:
  // code loaded at a kernel's first launch, page rounding, NCCL's connection buffers
  // made at the first collective. Negative where strata's peak was never sampled whole.
  double unattributed() const noexcept {
    return static_cast<double>(used_growth()) - static_cast<double>(strata_growth()) - static_cast<double>(cublas) -
           static_cast<double>(comms);
  }

  // A fixed row of doubles, for gathering over ranks (a missing context is -1).
  static constexpr std::size_t fields = 10;
  std::array<double, fields> values() const noexcept {
    const auto d = [](std::size_t v) { return static_cast<double>(v); };
    return {d(total),       d(start_used),    d(peak_used), d(strata_start),
            d(strata_peak), d(strata_blocks), d(report),    context ? d(*context) : -1.0,
            d(cublas),      d(comms)};
  }
  static device_memory from_values(std::span<const double> v) {
    expects<config_error>(v.size() == fields,
                          [&] { return cat("device_memory: ", v.size(), " values, not ", fields); });
    const auto z = [&](std::size_t i) {
      expects<config_error>(std::isfinite(v[i]) && v[i] >= 0 && v[i] < 1e18,
                            [&] { return cat("device_memory: value ", i, " is ", v[i], ", not a byte count"); });
      return static_cast<std::size_t>(v[i]);
    };
    device_memory m;
    m.total = z(0);
    m.start_used = z(1);
    m.peak_used = z(2);
    m.strata_start = z(3);
    m.strata_peak = z(4);
    m.strata_blocks = z(5);
    m.report = z(6);
    if (v[7] >= 0) m.context = z(7);
    m.cublas = z(8);
    m.comms = z(9);
    return m;
  }

  nlohmann::json to_json() const {
    nlohmann::json j = {{"total_bytes", total},
                        {"start_used_bytes", start_used},
                        {"peak_used_bytes", peak_used},
                        {"used_growth_bytes", used_growth()},
                        {"strata_start_bytes", strata_start},
                        {"strata_peak_bytes", strata_peak},
                        {"strata_growth_bytes", strata_growth()},
                        {"strata_blocks", strata_blocks},
                        {"report_bytes", report},
                        {"cublas_bytes", cublas},
                        {"comm_bytes", comms},
                        {"unattributed_bytes", unattributed()}};
    j["context_bytes"] = context ? nlohmann::json(*context) : nlohmann::json(nullptr);
    return j;
  }
  // The measured fields of to_json (the derived ones are ignored); `where` names the
  // object in messages. A missing or non-numeric field is a config_error naming it.
  static device_memory from_json(const nlohmann::json& j, const std::string& where) {
    expects<config_error>(j.is_object(), [&] { return where + ": not a JSON object"; });
    const auto bytes = [&](const char* key) -> std::size_t {
      expects<config_error>(j.contains(key), [&] { return cat(where, ": no \"", key, "\""); });
      const auto& v = j.at(key);
      expects<config_error>(v.is_number() && v.get<double>() >= 0 && std::isfinite(v.get<double>()),
                            [&] { return cat(where, ".", key, " is ", v.dump(), ", not a byte count"); });
      return static_cast<std::size_t>(v.get<double>());
    };
    device_memory m;
    m.total = bytes("total_bytes");
    m.start_used = bytes("start_used_bytes");
    m.peak_used = bytes("peak_used_bytes");
    m.strata_start = bytes("strata_start_bytes");
    m.strata_peak = bytes("strata_peak_bytes");
    m.strata_blocks = bytes("strata_blocks");
    m.report = bytes("report_bytes");
    m.cublas = bytes("cublas_bytes");
    m.comms = bytes("comm_bytes");
    if (j.contains("context_bytes") && !j.at("context_bytes").is_null()) m.context = bytes("context_bytes");
    return m;
  }
};

// The allowances of the rule, beyond the measured cuBLAS and communicator bytes. What
// each covers, and why it is this size:
namespace device_allowance {
inline constexpr std::size_t mib = std::size_t{1} << 20;
// strata's own device buffers outside the report: the engine's (the norm's partial sums
// and CUB's workspace, the optimizer's run table, the id checks' slots: KiB) and the
// device copy of the batch (ids and targets as floats: 4 MiB is 512 Ki tokens). The
// host's rule allows the same 4 MiB for its libraries' first-use buffers.
inline constexpr std::size_t engine = 4 * mib;
// The driver hands out device memory in 2 MiB pages: each live allocation may hold up to
// one page more than it asked for (a few hundred for a 0.5B model: under 3 % of it).
inline constexpr std::size_t page = 2 * mib;
// What the first step loads that no allocator counts, an estimate for CUDA 13 on an H200
// until a GPU run measures it (tests/cuda/device_memory.cu prints it): kernels' code,
// loaded into device memory at their first launch (lazy loading, the default since CUDA
// 12.2; strata's kernels are a few MiB, cuBLAS's GEMMs for the shapes used some tens),
// and a larger per-thread stack if a kernel needs one, which the driver reserves for
// every thread the device can hold (132 SMs x 2048 threads: 264 MiB per KiB of stack).
inline constexpr std::size_t first_use = 256 * mib;
}  // namespace device_allowance

// Whether a measured growth is within `tolerance` of a report plus an allowance, as the
// host's rule has it: (1 - tolerance) x report <= measured <= (1 + tolerance) x report +
// allowance. The text says which, with the numbers in MiB.
struct memory_verdict {
  std::string what;
  double measured = 0, report = 0, allowance = 0, low = 0, high = 0;
  bool ok = false;
  std::string text;
};

inline memory_verdict check_within(std::string what, double measured, double report, double allowance,
                                   double tolerance = 0.10) {
  const auto count = [&](const char* name, double v) {
    expects<config_error>(std::isfinite(v) && v >= 0, [&] { return cat(what, ": ", name, " is ", v, ", not >= 0"); });
  };
  count("the measured bytes", measured);
  count("the report", report);
  count("the allowance", allowance);
  expects<config_error>(tolerance >= 0 && tolerance < 1,
                        [&] { return cat(what, ": tolerance ", tolerance, " is not in [0, 1)"); });
  memory_verdict v;
  v.what = std::move(what);
  v.measured = measured;
  v.report = report;
  v.allowance = allowance;
  v.low = (1 - tolerance) * report;
  v.high = (1 + tolerance) * report + allowance;
  v.ok = measured >= v.low && measured <= v.high;
  char b[320];
  constexpr double m = 1 << 20;
  std::snprintf(b, sizeof b, "%s %.1f MiB %s [%.2f x report %.1f, %.2f x report + allowance %.1f] = [%.1f, %.1f] MiB",
                v.what.c_str(), measured / m,
                v.ok               ? "is within"
                : measured < v.low ? "is BELOW"
                                   : "is ABOVE",
                1 - tolerance, report / m, 1 + tolerance, allowance / m, v.low / m, v.high / m);
  v.text = b;
  return v;
}

// The two checks of a device run: strata's allocator high-water mark against the report
// (allowance: the engine's buffers), and the device's used memory growth against it
// (allowance: cuBLAS and the communicators as measured, the engine, page rounding of each
// live allocation, and the first step's code and stack).
inline std::size_t used_allowance(const device_memory& m) {
  return m.cublas + m.comms + device_allowance::engine + device_allowance::page * m.strata_blocks +
         device_allowance::first_use;
}
inline std::vector<memory_verdict> check_device_memory(const device_memory& m, double tolerance = 0.10) {
  const auto d = [](std::size_t v) { return static_cast<double>(v); };
  return {check_within("strata's allocator peak growth", d(m.strata_growth()), d(m.report), d(device_allowance::engine),
                       tolerance),
          check_within("device used memory growth", d(m.used_growth()), d(m.report), d(used_allowance(m)), tolerance)};
}

}  // namespace strata
