// What a lane-backed communicator (MPI's, Gloo's) reports of its operations: one trace
// event per finished operation while tracing, its busy time to a step profile, and its
// ring's history for a hang report.
// Their task descriptors share the fields read here (k, count, elem, peer, tag) and their
// kinds' names (send, recv, broadcast; name_of).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../../core/trace.hpp"
#include "../op_history.hpp"
#include "lane.hpp"

namespace strata::detail {

template <class Task>
void trace_lane_task(const std::string& comm, const Task& t, std::uint64_t seq, std::int64_t start_ns,
                     std::int64_t end_ns) {
  using k = typename Task::kind;
  if (auto* busy = comm_busy_sink().load(std::memory_order_relaxed))
    busy->add(name_of(t.k), static_cast<double>(end_ns - start_ns) * 1e-9);
  if (!tracing()) return;
  std::string args = cat("\"comm\":", json_string(comm), ",\"bytes\":", t.count * t.elem, ",\"count\":", t.count);
  if (seq) args += cat(",\"seq\":", seq);
  if (t.k == k::send || t.k == k::recv) args += cat(",\"peer\":", t.peer, ",\"tag\":", t.tag);
  trace_complete(cat("comm ", comm), seq ? cat(name_of(t.k), " #", seq) : std::string(name_of(t.k)), start_ns, end_ns,
                 std::move(args));
}

template <class Task, class Exec>
comm_history lane_history(lane<Task, Exec>& l, std::string comm, std::uint64_t id, std::vector<int> members, int rank) {
  using k = typename Task::kind;
  using clock = typename lane<Task, Exec>::clock;
  comm_history h;
  h.name = std::move(comm);
  h.id = id;
  h.members = std::move(members);
  h.rank = rank;
  const auto now = clock::now();
  auto ago = [&](const typename clock::time_point* t) {
    return t ? std::chrono::duration<double>(now - *t).count() : -1.0;
  };
  const auto totals =
      l.history([&](std::uint64_t ticket, std::uint64_t seq, const Task& t, const typename clock::time_point& enqueued,
                    const typename clock::time_point* started, const typename clock::time_point* ended) {
        op_record o;
        o.ticket = ticket;
        o.seq = seq;
        o.op = name_of(t.k);
        o.count = t.count;
        o.bytes = t.count * t.elem;
        if (t.k == k::send || t.k == k::recv || t.k == k::broadcast) o.peer = t.peer;
        if (t.k == k::send || t.k == k::recv) o.tag = t.tag;
        o.enqueued_ago = ago(&enqueued);
        o.started_ago = ago(started);
        o.ended_ago = ago(ended);
        h.ops.push_back(std::move(o));
      });
  h.submitted = totals.submitted;
  h.completed = totals.completed;
  h.collectives = totals.collectives;
  return h;
}

}  // namespace strata::detail
