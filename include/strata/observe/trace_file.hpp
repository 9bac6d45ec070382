// trace_session: records every rank's trace events (core/trace.hpp) from its start to
// finish() and writes them as one Chrome trace JSON file (chrome://tracing, Perfetto):
// one process per rank ("rank N"), one track (thread) per kind of work and per
// communicator. Collective over the world: clocks are aligned at a barrier at the start,
// and rank 0 gathers the other ranks' events and writes the file.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../comm/reduce_op.hpp"
#include "../core/error.hpp"
#include "../core/json_text.hpp"
#include "../core/trace.hpp"

namespace strata {

namespace detail {

// Tracks in the order a reader wants them: compute first, then the rest, communicators last.
inline int track_order(const std::string& track) {
  if (track == trace_track::compute) return 0;
  if (track == trace_track::optimizer) return 1;
  if (track == trace_track::data) return 2;
  if (track == trace_track::checkpoint) return 3;
  return 4;
}

// One rank's events as the members of a JSON array (no brackets): metadata naming the
// process and its tracks, then complete events in microseconds from `origin_ns`.
inline std::string trace_json_of(int rank, std::vector<trace_event> events, std::int64_t origin_ns) {
  std::map<std::string, int> tids;
  for (const auto& e : events) tids.emplace(e.track, 0);
  std::vector<std::string> tracks;
  for (const auto& [t, id] : tids) tracks.push_back(t);
  std::stable_sort(tracks.begin(), tracks.end(),
                   [](const auto& a, const auto& b) { return track_order(a) < track_order(b); });
  for (std::size_t i = 0; i < tracks.size(); ++i) tids[tracks[i]] = static_cast<int>(i) + 1;
  std::string out;
  // A metadata ("M") event naming the process or a track.
  auto meta = [&](const char* what, int tid, const char* key, const std::string& value_json) {
    if (!out.empty()) out += ",\n";
    out += cat("{\"ph\":\"M\",\"name\":\"", what, "\",\"pid\":", rank);
    if (tid > 0) out += cat(",\"tid\":", tid);
    out += cat(",\"args\":{\"", key, "\":", value_json, "}}");
  };
  meta("process_name", 0, "name", json_string(cat("rank ", rank)));
  meta("process_sort_index", 0, "sort_index", cat(rank));
  for (const auto& t : tracks) {
    meta("thread_name", tids[t], "name", json_string(t));
    meta("thread_sort_index", tids[t], "sort_index", cat(tids[t]));
  }
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  char num[64];
  for (const auto& e : events) {
    // Written by hand, not through a JSON library: a step holds hundreds of events.
    if (!out.empty()) out += ",\n";
    out += "{\"ph\":\"X\",\"name\":";
    append_json_string(out, e.name);
    out += ",\"cat\":";
    append_json_string(out, e.track);
    std::snprintf(num, sizeof num, ",\"pid\":%d,\"tid\":%d", rank, tids[e.track]);
    out += num;
    std::snprintf(num, sizeof num, ",\"ts\":%.3f,\"dur\":%.3f", static_cast<double>(e.start_ns - origin_ns) / 1e3,
                  static_cast<double>(std::max<std::int64_t>(e.end_ns - e.start_ns, 0)) / 1e3);
    out += num;
    out += ",\"args\":{";
    out += e.args;
    out += "}}";
  }
  return out;
}

}  // namespace detail

template <class World>
class trace_session {
 public:
  // An empty path: no session (nothing recorded, nothing written).
  trace_session(World& world, std::string path) : world_(world), path_(std::move(path)) {
    if (path_.empty()) return;
    int failed = 0;
    if (world_.rank() == 0) {
      std::ofstream probe(path_, std::ios::trunc);  // fail now, not after the run
      failed = probe ? 0 : 1;
    }
    world_.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
    expects<config_error>(failed == 0, [&] { return cat("--trace ", path_, ": cannot open it for writing"); });
    (void)detail::take_trace_events();  // drop anything recorded before
    world_.barrier();
    origin_ns_ = trace_clock_ns();  // the barrier's exit: the same moment on every rank, within its latency
    detail::set_tracing(true);
    active_ = true;
  }
  trace_session(const trace_session&) = delete;
  trace_session& operator=(const trace_session&) = delete;
  // A trace_session not finished (an exception on the way out) records no more and writes nothing:
  // writing is collective, and the other ranks may not be there.
  ~trace_session() {
    if (active_) detail::set_tracing(false);
  }

  // Collective: stops recording, gathers every rank's events on rank 0, writes the file.
  // Returns the number of events written (on rank 0; 0 elsewhere).
  std::size_t finish() {
    if (!active_) return 0;
    active_ = false;
    detail::set_tracing(false);
    const auto events = detail::take_trace_events();
    const std::string mine = detail::trace_json_of(world_.rank(), events, origin_ns_);
    const int p = world_.size();
    std::vector<std::uint64_t> sizes(static_cast<std::size_t>(p));
    const std::uint64_t n = mine.size(), count = events.size();
    std::vector<std::uint64_t> counts(static_cast<std::size_t>(p));
    world_.all_gather(std::span<const std::uint64_t>(&n, 1), std::span<std::uint64_t>(sizes));
    world_.all_gather(std::span<const std::uint64_t>(&count, 1), std::span<std::uint64_t>(counts));
    const auto bytes = [](const std::string& s) {
      return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(s.data()), s.size());
    };
    if (world_.rank() != 0) {
      world_.send(bytes(mine), 0, trace_tag);
      return 0;
    }
    std::ofstream f(path_, std::ios::trunc);
    f << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n" << mine;
    std::size_t total = count;
    for (int r = 1; r < p; ++r) {
      std::string text(sizes[static_cast<std::size_t>(r)], '\0');
      world_.recv(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(text.data()), text.size()), r, trace_tag);
      f << ",\n" << text;
      total += counts[static_cast<std::size_t>(r)];
    }
    f << "\n]}\n";
    expects<config_error>(static_cast<bool>(f), [&] { return cat("--trace ", path_, ": writing failed"); });
    return total;
  }

 private:
  static constexpr int trace_tag = 7;
  World& world_;
  std::string path_;
  std::int64_t origin_ns_ = 0;
  bool active_ = false;
};

}  // namespace strata
