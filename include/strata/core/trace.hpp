// Trace events: what ran, on which track, from when and for how long, recorded while a
// trace session is on (observe/trace_file.hpp writes them as a Chrome trace). Each
// thread appends to a buffer of its own; off, a site costs one relaxed load and a branch.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata {

// The tracks every rank has; each communicator adds one of its own ("comm world", ...).
namespace trace_track {
inline constexpr std::string_view compute = "compute", optimizer = "optimizer", data = "data",
                                  checkpoint = "checkpoint";
}

struct trace_event {
  std::string name;
  std::string track;
  std::int64_t start_ns = 0, end_ns = 0;  // steady clock
  std::string args;                       // a JSON object's members ("\"bytes\":28"), or empty
};

namespace detail {

struct trace_buffer {
  std::mutex m;  // taken by the owning thread per event (uncontended) and by a collector
  std::vector<trace_event> events;
};

struct trace_state {
  std::atomic<bool> on{false};
  std::mutex m;
  std::vector<std::shared_ptr<trace_buffer>> buffers;  // of every thread that recorded
};

// Never destroyed: threads may record during static destruction.
inline trace_state& trace_global() {
  static trace_state* s = new trace_state;
  return *s;
}

inline trace_buffer& this_thread_trace_buffer() {
  thread_local std::shared_ptr<trace_buffer> b = [] {
    auto p = std::make_shared<trace_buffer>();
    auto& g = trace_global();
    std::lock_guard lk(g.m);
    g.buffers.push_back(p);
    return p;
  }();
  return *b;
}

}  // namespace detail

inline bool tracing() noexcept { return detail::trace_global().on.load(std::memory_order_relaxed); }

namespace detail {

// A step profile (train/step_profile.hpp) listens to the trace scopes and waits of the
// thread that runs a step, traced or not: each scope entered and left is a mark on its
// timeline. Installed only for that thread and step; null otherwise.
class profile_hook {
 public:
  virtual void enter(std::string_view track, const std::string& name) = 0;
  virtual void leave() = 0;
  // The thread stood `seconds` waiting for a device to finish its queued work (on a GPU,
  // the host's time, which the device's timeline does not show).
  virtual void waited_for_device(double seconds) = 0;

 protected:
  ~profile_hook() = default;
};

inline profile_hook*& this_thread_profile() noexcept {
  thread_local profile_hook* hook = nullptr;
  return hook;
}

// Busy time of each kind of communication while a profile collects it (from every lane
// thread): the operation's name and its seconds from start to end on its lane.
struct comm_busy {
  std::mutex m;
  std::vector<std::pair<std::string, double>> by_kind;
  void add(std::string_view kind, double seconds) {
    std::lock_guard lk(m);
    for (auto& [k, s] : by_kind)
      if (k == kind) {
        s += seconds;
        return;
      }
    by_kind.emplace_back(std::string(kind), seconds);
  }
};

inline std::atomic<comm_busy*>& comm_busy_sink() noexcept {
  static std::atomic<comm_busy*> sink{nullptr};
  return sink;
}

// Whether a finished lane operation is wanted: by a trace or by a profile.
inline bool lane_ops_observed() noexcept {
  return tracing() || comm_busy_sink().load(std::memory_order_relaxed) != nullptr;
}

}  // namespace detail

inline std::int64_t trace_clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Records one complete event (when tracing).
inline void trace_complete(std::string_view track, std::string name, std::int64_t start_ns, std::int64_t end_ns,
                           std::string args = {}) {
  if (!tracing()) return;
  auto& b = detail::this_thread_trace_buffer();
  std::lock_guard lk(b.m);
  b.events.push_back({std::move(name), std::string(track), start_ns, end_ns, std::move(args)});
}

// An event from construction to destruction. `name` is a string, or a callable returning
// one, called only when tracing (so a name built from pieces costs nothing when off).
class trace_scope {
 public:
  template <class Name>
  trace_scope(std::string_view track, Name&& name) {
    const bool traced = tracing();
    profile_ = detail::this_thread_profile();
    if (!traced && !profile_) return;
    track_ = track;
    if constexpr (std::is_invocable_v<Name>)
      name_ = std::string(name());
    else
      name_ = std::string(name);
    if (profile_) profile_->enter(track_, name_);
    if (traced) start_ = trace_clock_ns();
  }
  trace_scope(const trace_scope&) = delete;
  trace_scope& operator=(const trace_scope&) = delete;
  ~trace_scope() {
    if (profile_) profile_->leave();
    if (start_ != 0) trace_complete(track_, std::move(name_), start_, trace_clock_ns(), std::move(args_));
  }
  // Adds `"key":value` (value already JSON) to the event's arguments.
  void arg(std::string_view key, const std::string& json_value) {
    if (start_ == 0) return;
    if (!args_.empty()) args_ += ',';
    args_ += '"';
    args_ += key;
    args_ += "\":";
    args_ += json_value;
  }

 private:
  std::string_view track_;
  std::string name_, args_;
  std::int64_t start_ = 0;
  detail::profile_hook* profile_ = nullptr;
};

namespace detail {

inline void set_tracing(bool on) { trace_global().on.store(on, std::memory_order_relaxed); }

// Every thread's events so far, moved out.
inline std::vector<trace_event> take_trace_events() {
  auto& g = trace_global();
  std::lock_guard lk(g.m);
  std::vector<trace_event> all;
  for (auto& b : g.buffers) {
    std::lock_guard bl(b->m);
    for (auto& e : b->events) all.push_back(std::move(e));
    b->events.clear();
  }
  return all;
}

}  // namespace detail

}  // namespace strata
