// What a run shows while it trains: rank 0's progress line (every N steps), a JSON Lines
// metrics file (a header, then one object per step with every rank's memory and idle
// time), and a summary at the end. step() is collective over the world: each rank's
// peak memory (host and, on a GPU, device) and idle time reach rank 0, which prints and
// writes.
#pragma once
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../space/device_memory.hpp"
#include "../train/report.hpp"
#include "resident.hpp"

namespace strata {

struct progress_options {
  long every = 1;                // print every N steps (and the last)
  bool quiet = false;            // no progress lines (the metrics file and summary still)
  double tokens_per_sample = 0;  // a language model's sequence: rates in tokens/s
  double flops_per_sample = 0;   // model FLOPs of one sample, forward and backward (observe/flops.hpp)
  double peak_flops = 0;         // one process's peak FLOP/s: MFU's denominator (0: no MFU)
  std::string metrics_path;      // JSON Lines, written by world rank 0 ("": none)
  // Rank 0 hands it each step's record, the metrics file's line (an MLflow run, say).
  std::function<void(const nlohmann::json& record, long step)> on_step;
};

namespace detail {

inline std::string eta_text(double seconds) {
  char b[32];
  const long s = static_cast<long>(seconds + 0.5);
  if (s >= 3600)
    std::snprintf(b, sizeof b, "%ldh%02ldm", s / 3600, s / 60 % 60);
  else
    std::snprintf(b, sizeof b, "%ldm%02lds", s / 60, s % 60);
  return b;
}

inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace detail

template <class World>
class progress_log {
 public:
  // Rank 0 opens the metrics file (a config_error if it cannot) and writes `header` as its
  // first line, under "header".
  progress_log(World& world, progress_options o, const nlohmann::json& header = nlohmann::json::object())
      : world_(world), o_(std::move(o)) {
    int failed = 0;
    if (world_.rank() == 0 && !o_.metrics_path.empty()) {
      metrics_.open(o_.metrics_path, std::ios::trunc);
      failed = metrics_ ? 0 : 1;
      if (!failed) metrics_ << nlohmann::json{{"header", header}}.dump() << "\n" << std::flush;
    }
    world_.broadcast(std::span<int>(&failed, 1), 0);
    expects<config_error>(failed == 0, [&] { return "--metrics " + o_.metrics_path + ": cannot be written"; });
  }

  // Collective. `reported` is this rank's memory report total (bytes); `device`, a device
  // trainer's measured device memory (trainer::device_memory()).
  void step(const step_stats& s, long total_steps, std::size_t reported,
            const std::optional<device_memory>& device = std::nullopt) {
    std::vector<double> mine = {static_cast<double>(peak_resident_bytes()), static_cast<double>(reported),
                                s.idle_seconds, s.seconds, device ? 1.0 : 0.0};
    const auto dev = device ? device->values() : std::array<double, device_memory::fields>{};
    mine.insert(mine.end(), dev.begin(), dev.end());
    std::vector<double> all(per * static_cast<std::size_t>(world_.size()));
    world_.all_gather(std::span<const double>(mine), std::span<double>(all));
    if (world_.rank() != 0) return;
    ++done_;
    seconds_.push_back(s.seconds);
    const bool tokens = o_.tokens_per_sample > 0;
    const double rate = tokens ? s.samples_per_s * o_.tokens_per_sample : s.samples_per_s;
    const double mfu = mfu_of(s.samples_per_s);
    std::size_t top = 0;  // the rank with the largest peak
    double idle = 0;
    for (std::size_t r = 0; r < ranks(); ++r) {
      if (all[r * per] > all[top * per]) top = r;
      idle += all[r * per + 3] > 0 ? all[r * per + 2] / all[r * per + 3] : 0;
      peak_[r] = std::max(peak_[r], all[r * per]);
      reported_[r] = all[r * per + 1];
      if (all[r * per + 4] > 0)
        device_[r] = device_memory::from_values(std::span(all).subspan(r * per + 5, dev.size()));
    }
    std::size_t top_device = 0;  // the rank whose device grew most
    for (std::size_t r = 0; r < ranks(); ++r)
      if (device_[r] && device_[r]->used_growth() > device_[top_device].value_or(device_memory{}).used_growth())
        top_device = r;
    idle /= static_cast<double>(ranks());
    rates_.push_back(rate);
    if (mfu > 0) mfus_.push_back(mfu);
    const double eta = detail::median_of(seconds_) * static_cast<double>(std::max(0L, total_steps - s.step));
    if (!o_.quiet && (s.step % std::max(1L, o_.every) == 0 || s.step == total_steps)) {
      char line[448];
      std::snprintf(line, sizeof line,
                    "step %4ld/%ld  loss %.6f  lr %.3e  grad_norm %.4e  scale %g  %9.4g %s/s%s  mem %.0f MiB (rank "
                    "%zu)%s  idle %.1f%%  ETA %s  %d thread%s%s",
                    s.step, total_steps, static_cast<double>(s.loss), static_cast<double>(s.lr), s.grad_norm,
                    static_cast<double>(s.loss_scale), rate, tokens ? "tokens" : "samples",
                    mfu > 0 ? cat("  MFU ", fixed1(100 * mfu), "%").c_str() : "", all[top * per] / mib, top,
                    device_[top_device]
                        ? cat(", device +", fixed0(static_cast<double>(device_[top_device]->used_growth()) / mib),
                              " MiB (rank ", top_device, ")")
                              .c_str()
                        : "",
                    100 * idle, detail::eta_text(eta).c_str(), s.host_threads, s.host_threads == 1 ? "" : "s",
                    s.skipped ? cat("  [skipped: non-finite gradients",
                                    s.nonfinite_param.empty() ? "" : cat(", the first in ", s.nonfinite_param), "]")
                                    .c_str()
                              : "");
      std::printf("%s\n", line);
      std::fflush(stdout);
    }
    if (metrics_ || o_.on_step) {
      nlohmann::json j = {{"step", s.step},
                          {"loss", s.loss},
                          {"lr", s.lr},
                          {"grad_norm", s.grad_norm},
                          {"loss_scale", s.loss_scale},
                          {"skipped", s.skipped},
                          {"seconds", s.seconds},
                          {tokens ? "tokens_per_s" : "samples_per_s", rate},
                          {"host_threads", s.host_threads}};
      if (mfu > 0) j["mfu"] = mfu;
      if (s.skipped) j["nonfinite_param"] = s.nonfinite_param;
      nlohmann::json rs = nlohmann::json::array();
      for (std::size_t r = 0; r < ranks(); ++r) {
        rs.push_back({{"rank", r},
                      {"peak_rss_bytes", all[r * per]},
                      {"memory_bytes", all[r * per + 1]},
                      {"idle_seconds", all[r * per + 2]}});
        if (device_[r]) rs.back()["device"] = device_[r]->to_json();
      }
      j["ranks"] = rs;
      if (metrics_) metrics_ << j.dump() << "\n" << std::flush;
      if (o_.on_step) o_.on_step(j, s.step);
    }
  }

  // Rank 0 prints the summary: step times, rates, MFU, and each rank's peak memory next
  // to its report; on a GPU host and device side by side (see summary_table).
  void summary() const {
    if (world_.rank() != 0 || done_ == 0) return;
    double mean = 0;
    for (double t : seconds_) mean += t;
    mean /= static_cast<double>(seconds_.size());
    const bool tokens = o_.tokens_per_sample > 0;
    std::printf("summary: %ld steps, step time mean %.3f s, median %.3f s; %.4g %s/s (median)%s\n", done_, mean,
                detail::median_of(seconds_), detail::median_of(rates_), tokens ? "tokens" : "samples",
                mfus_.empty() ? "" : cat(", MFU ", fixed1(100 * detail::median_of(mfus_)), "%").c_str());
    std::fputs(summary_table(peak_, reported_, device_).c_str(), stdout);
    std::fflush(stdout);
  }

  // Each rank's peak resident bytes next to its report; where the ranks had a device
  // record, the host's side (resident peak, the report's host part) and the device's: its
  // used memory at the start and at the peak (the whole device's, other processes and
  // this context included), strata's allocator peak and the report's device part (which
  // the rule of space/device_memory.hpp holds the growths to), and the named allowances.
  static std::string summary_table(const std::vector<double>& peak, const std::vector<double>& reported,
                                   const std::vector<std::optional<device_memory>>& device) {
    std::string t;
    char b[256];
    const bool gpu = std::any_of(device.begin(), device.end(), [](const auto& d) { return d.has_value(); });
    if (!gpu) {
      t = "  rank   peak RSS MiB   reported MiB\n";
      for (std::size_t r = 0; r < peak.size(); ++r) {
        std::snprintf(b, sizeof b, "  %4zu %14.1f %14.1f\n", r, peak[r] / mib, reported[r] / mib);
        t += b;
      }
      return t;
    }
    t = "         -------- host --------   ------------------------------ device -------------------------------\n"
        "  rank   peak RSS   report part   used start  used peak  strata peak  report part  context cuBLAS   comm"
        "   (MiB)\n";
    for (std::size_t r = 0; r < peak.size(); ++r) {
      const device_memory d = device[r].value_or(device_memory{});
      const double dev_report = static_cast<double>(d.report);
      std::snprintf(b, sizeof b, "  %4zu %10.1f %13.1f %12.1f %10.1f %12.1f %12.1f %8s %6.1f %6.1f\n", r, peak[r] / mib,
                    std::max(0.0, reported[r] - dev_report) / mib, static_cast<double>(d.start_used) / mib,
                    static_cast<double>(d.peak_used) / mib, static_cast<double>(d.strata_growth()) / mib,
                    dev_report / mib, d.context ? fixed1(static_cast<double>(*d.context) / mib).c_str() : "-",
                    static_cast<double>(d.cublas) / mib, static_cast<double>(d.comms) / mib);
      t += b;
    }
    return t;
  }

 private:
  // peak rss, reported bytes, idle s, step s, has a device record, the record
  static constexpr std::size_t per = 5 + device_memory::fields;
  static constexpr double mib = 1 << 20;
  static std::string fixed1(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f", v);
    return b;
  }
  static std::string fixed0(double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.0f", v);
    return b;
  }
  std::size_t ranks() const { return static_cast<std::size_t>(world_.size()); }
  // Model FLOPs achieved over every process's peak.
  double mfu_of(double samples_per_s) const {
    if (o_.peak_flops <= 0 || o_.flops_per_sample <= 0) return 0;
    return samples_per_s * o_.flops_per_sample / (o_.peak_flops * static_cast<double>(ranks()));
  }

  World& world_;
  progress_options o_;
  std::ofstream metrics_;
  long done_ = 0;
  std::vector<double> seconds_, rates_, mfus_;
  std::vector<double> peak_ = std::vector<double>(static_cast<std::size_t>(world_.size()), 0.0);
  std::vector<double> reported_ = std::vector<double>(static_cast<std::size_t>(world_.size()), 0.0);
  std::vector<std::optional<device_memory>> device_ =
      std::vector<std::optional<device_memory>>(static_cast<std::size_t>(world_.size()));
};

}  // namespace strata
