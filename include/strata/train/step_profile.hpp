// Where a step's time goes (trainer_options::profile): the step's timeline, split at
// every trace scope and wait of the thread that runs it into parts by what the step was
// doing — each layer kind's forward and backward (the loss is the model's last layer),
// the gradient norm, the optimizer, the waits on communication, and the rest — plus the
// busy time of each kind of host communication on the lanes, which overlaps the parts.
// The timeline is the space's clock: the host's steady clock, or on a GPU CUDA events on
// the compute stream, so a part is the device time of the work queued while the step was
// in it (a wait there is the time the stream stood waiting).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "../core/trace.hpp"

namespace strata {

struct profile_part {
  std::string name;
  double seconds = 0;
};

struct step_profile {
  double step_seconds = 0;      // the step's wall time (step_stats::seconds)
  double timeline_seconds = 0;  // from the step's first mark to its last: the parts add up to it
  std::vector<profile_part> parts;
  std::vector<profile_part> comm;  // host communication's busy time by kind (overlaps the parts)
  // On a device, the host's side of the step up to its last mark, on the host's clock:
  // the time it stood waiting for the device to finish queued work (the gradient norm's
  // and the loss's readbacks), and the rest, in which it issued the work. Where issuing
  // takes about as long as the device's timeline, the launches bound the step (what a
  // CUDA graph of the step saves); where the host waits long, the device is what bounds it.
  bool host_waited_for_device = false;
  double host_issue_seconds = 0, host_wait_seconds = 0;

  // The share of the step's wall time the parts account for.
  double covered() const { return step_seconds > 0 ? timeline_seconds / step_seconds : 0; }
};

// The profile as a table: each part's milliseconds and share of the step, then the
// communication; each line starts with `indent` ("# " makes it a comment in a benchmark's
// output).
inline std::string profile_table(const step_profile& p, std::string_view indent = "  ") {
  std::string out;
  char line[160];
  const double step = p.step_seconds > 0 ? p.step_seconds : 1;
  const auto add = [&] { out.append(indent).append(line); };
  std::snprintf(line, sizeof line, "%-28s %10s %7s\n", "part", "ms", "% step");
  add();
  for (const auto& part : p.parts) {
    std::snprintf(line, sizeof line, "%-28s %10.3f %7.1f\n", part.name.c_str(), part.seconds * 1e3,
                  100 * part.seconds / step);
    add();
  }
  std::snprintf(line, sizeof line, "%-28s %10.3f %7.1f   (step %.3f ms)\n", "sum of the parts",
                p.timeline_seconds * 1e3, 100 * p.covered(), p.step_seconds * 1e3);
  add();
  if (p.host_waited_for_device) {
    std::snprintf(line, sizeof line, "%-28s %10.3f %7.1f   (host clock; near the parts' sum: launch-bound)\n",
                  "host issuing the work", p.host_issue_seconds * 1e3, 100 * p.host_issue_seconds / step);
    add();
    std::snprintf(line, sizeof line, "%-28s %10.3f %7.1f   (host clock; the host's lead over the device)\n",
                  "host waiting on the device", p.host_wait_seconds * 1e3, 100 * p.host_wait_seconds / step);
    add();
  }
  for (const auto& c : p.comm) {
    std::snprintf(line, sizeof line, "%-28s %10.3f %7.1f   (on its lane, overlapping)\n", ("comm " + c.name).c_str(),
                  c.seconds * 1e3, 100 * c.seconds / step);
    add();
  }
  return out;
}

// Of several steps' profiles, the one whose step took the median time (of two middle
// ones, the shorter): a step to show that is neither the warm-up nor an outlier.
inline const step_profile& median_step_profile(const std::vector<step_profile>& steps) {
  std::vector<std::size_t> order(steps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return steps[a].step_seconds < steps[b].step_seconds; });
  return steps.at(order.at((order.size() - 1) / 2));
}

namespace detail {

// What a scope counts as: "layers.3 forward" and "blocks[2] forward" are "layers forward"
// and "blocks forward" (one kind over the layers of a list); the step's own scope is the
// rest of the step.
inline std::string profile_kind(std::string_view track, const std::string& name) {
  if (track == trace_track::optimizer) return "optimizer";
  if (track == "wait") return "waits";
  if (name.rfind("step ", 0) == 0) return "rest of the step";
  std::string out;
  std::size_t i = 0;
  while (i < name.size()) {
    const char c = name[i];
    if (c == '[') {  // [digits]
      std::size_t j = i + 1;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      if (j < name.size() && name[j] == ']' && j > i + 1) {
        i = j + 1;
        continue;
      }
    }
    if (c == '.') {  // .digits up to a dot, a space or the end
      std::size_t j = i + 1;
      while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
      if (j > i + 1 && (j == name.size() || name[j] == '.' || name[j] == ' ' || name[j] == '[')) {
        i = j;
        continue;
      }
    }
    out += c;
    ++i;
  }
  return out;
}

// The marks of one step on a space's timeline: Marks has reset(), mark() (appends one
// now) and seconds(i, j) between two marks, valid once the space has caught up (on a GPU,
// after a synchronize).
template <class Marks>
class step_profiler final : public profile_hook {
 public:
  explicit step_profiler(Marks& marks) : marks_(marks) {}
  step_profiler(const step_profiler&) = delete;
  step_profiler& operator=(const step_profiler&) = delete;
  ~step_profiler() { stop(); }

  // From here the thread's scopes and waits, and every lane's operations, are counted.
  void begin() {
    active_ = true;
    marks_.reset();
    stack_.clear();
    part_of_mark_.clear();
    busy_.by_kind.clear();
    host_start_ns_ = trace_clock_ns();
    host_span_ns_ = 0;
    host_wait_ = 0;
    waited_for_device_ = false;
    this_thread_profile() = this;
    comm_busy_sink().store(&busy_, std::memory_order_relaxed);
    mark("rest of the step");
  }
  // The step's last mark, before the space is synchronized.
  void finish() {
    marks_.mark();
    host_span_ns_ = trace_clock_ns() - host_start_ns_;
    stop();
  }
  // No more marks: after finish, or when the step throws.
  void stop() noexcept {
    active_ = false;
    if (this_thread_profile() == this) this_thread_profile() = nullptr;
    comm_busy* mine = &busy_;
    comm_busy_sink().compare_exchange_strong(mine, nullptr);
  }
  // After the space caught up: the parts, in the order first met.
  step_profile resolve(double step_seconds) {
    step_profile p;
    p.step_seconds = step_seconds;
    std::vector<double> by_part(names_.size(), 0.0);
    for (std::size_t i = 0; i < part_of_mark_.size(); ++i) by_part[part_of_mark_[i]] += marks_.seconds(i, i + 1);
    for (std::size_t k = 0; k < names_.size(); ++k) {
      if (by_part[k] == 0 && !used_[k]) continue;
      p.parts.push_back({names_[k], by_part[k]});
      p.timeline_seconds += by_part[k];
    }
    {
      std::lock_guard lk(busy_.m);
      for (const auto& [k, s] : busy_.by_kind) p.comm.push_back({k, s});
    }
    p.host_waited_for_device = waited_for_device_;
    p.host_wait_seconds = host_wait_;
    p.host_issue_seconds = std::max(0.0, static_cast<double>(host_span_ns_) * 1e-9 - host_wait_);
    std::fill(used_.begin(), used_.end(), false);
    return p;
  }

  void enter(std::string_view track, const std::string& name) override {
    if (!active_) return;
    stack_.push_back(part_index(profile_kind(track, name)));
    mark_part(stack_.back());
  }
  void leave() override {
    if (!active_) return;  // a scope opened before finish() and closed after it
    if (!stack_.empty()) stack_.pop_back();
    mark_part(stack_.empty() ? std::size_t{0} : stack_.back());
  }
  void waited_for_device(double seconds) override {
    if (!active_) return;
    host_wait_ += seconds;
    waited_for_device_ = true;
  }

 private:
  std::size_t part_index(const std::string& kind) {
    for (std::size_t k = 0; k < names_.size(); ++k)
      if (names_[k] == kind) return k;
    names_.push_back(kind);
    used_.push_back(false);
    return names_.size() - 1;
  }
  void mark(const std::string& kind) { mark_part(part_index(kind)); }
  void mark_part(std::size_t k) {
    marks_.mark();
    part_of_mark_.push_back(k);
    used_[k] = true;
  }

  Marks& marks_;
  bool active_ = false;
  std::vector<std::size_t> stack_;         // the parts of the scopes open now
  std::vector<std::size_t> part_of_mark_;  // mark i starts a stretch of this part
  std::vector<std::string> names_;         // every part met, kept across steps (0: the rest)
  std::vector<bool> used_;                 // met in this step
  comm_busy busy_;
  std::int64_t host_start_ns_ = 0, host_span_ns_ = 0;  // the host's clock, begin() to finish()
  double host_wait_ = 0;
  bool waited_for_device_ = false;
};

// The host's timeline: steady-clock times.
class host_marks {
 public:
  void reset() { ns_.clear(); }
  void mark() { ns_.push_back(trace_clock_ns()); }
  double seconds(std::size_t i, std::size_t j) const { return static_cast<double>(ns_[j] - ns_[i]) * 1e-9; }

 private:
  std::vector<std::int64_t> ns_;
};

}  // namespace detail

}  // namespace strata
