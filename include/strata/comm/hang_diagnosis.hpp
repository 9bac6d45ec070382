// Which rank a hang waits for: from every rank's recent operations (comm/op_history.hpp),
// per communicator the oldest collective some member has not finished, the members that
// wait in it and those that never reached it, with what those were doing instead.
// Collectives are matched by their sequence number on the communicator: MPI requires
// every member to call a communicator's collectives in the same order.
#pragma once
#include <algorithm>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "op_history.hpp"

namespace strata {

struct hang_diagnosis {
  std::vector<std::string> findings;  // one line each, most important first
  std::vector<int> waiting;           // world ranks blocked in an unfinished collective
  std::vector<int> not_reached;       // world ranks that never reached one others wait in
  std::vector<int> missing;           // world ranks without a dump

  std::string text(const std::string& prefix = "") const {
    std::string s;
    for (const auto& f : findings) s += prefix + f + "\n";
    return s;
  }
};

namespace detail {

// "rank 2", "ranks 0, 1", "ranks 0-3, 6"
[[gnu::cold]] inline std::string rank_list(std::vector<int> r) {
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::string s = r.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < r.size();) {
    std::size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    if (i) s += ", ";
    s += j == i ? cat(r[i]) : cat(r[i], j == i + 1 ? ", " : "-", r[j]);
    i = j + 1;
  }
  return s;
}

[[gnu::cold]] inline std::string seconds_text(double s) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f s", s);
  return b;
}

[[gnu::cold]] inline std::string op_text(const op_record& o, const comm_history& c) {
  std::string d = o.seq ? cat(o.op, " #", o.seq) : o.op;
  if (o.op != "barrier" && o.op != "split" && o.op != "free") d += cat(" of ", o.count, " elements");
  auto world = [&](int peer) {
    return peer >= 0 && static_cast<std::size_t>(peer) < c.members.size() ? c.members[static_cast<std::size_t>(peer)]
                                                                          : peer;
  };
  if (o.op == "send") d += cat(" to rank ", world(o.peer), " tag ", o.tag);
  if (o.op == "recv") d += cat(" from rank ", world(o.peer), " tag ", o.tag);
  if (o.op == "broadcast") d += cat(" from root rank ", world(o.peer));
  return d;
}

inline const op_record* find_collective(const comm_history& c, std::uint64_t seq) {
  for (const auto& o : c.ops)
    if (o.seq == seq) return &o;
  return nullptr;
}

// What a rank that did not reach a collective did last, on any communicator: what it
// waits in now, or when its last operation ended.
[[gnu::cold]] inline std::string last_activity(const rank_dump& d) {
  const op_record* latest = nullptr;
  const comm_history* where = nullptr;
  for (const auto& c : d.comms)
    for (const auto& o : c.ops)
      if (!o.done() && o.started_ago >= 0)
        return cat("it waits in ", op_text(o, c), " on ", c.name, " since ", seconds_text(o.started_ago), " ago");
  for (const auto& c : d.comms)
    for (const auto& o : c.ops)
      if (!latest || o.ended_ago < latest->ended_ago) latest = &o, where = &c;
  const char* why = " (it is computing, or blocked outside strata's communication)";
  if (!latest) return cat("it has no recorded operation", why);
  return cat("its last operation, ", op_text(*latest, *where), " on ", where->name, ", ended ",
             seconds_text(latest->ended_ago), " ago", why);
}

}  // namespace detail

// `dumps` holds at most one dump per world rank; ranks of `world_size` without one are
// reported as missing.
[[gnu::cold]] inline hang_diagnosis diagnose_hang(std::span<const rank_dump> dumps, int world_size) {
  using detail::rank_list;
  hang_diagnosis h;
  std::map<int, const rank_dump*> by_rank;
  for (const auto& d : dumps) by_rank[d.world_rank] = &d;
  for (int r = 0; r < world_size; ++r)
    if (!by_rank.count(r)) h.missing.push_back(r);
  if (!h.missing.empty())
    h.findings.push_back(cat(rank_list(h.missing), " gave no operations (dead, stopped, or its dump is missing)"));

  // Every communicator, by id, with each member's history.
  struct comm_view {
    const comm_history* any = nullptr;
    std::map<int, const comm_history*> at;  // world rank -> its history
  };
  std::map<std::uint64_t, comm_view> comms;
  for (const auto& d : dumps)
    for (const auto& c : d.comms) {
      auto& v = comms[c.id];
      if (!v.any) v.any = &c;
      v.at[d.world_rank] = &c;
    }

  for (const auto& [id, v] : comms) {
    const auto& name = v.any->name;
    const std::string where = cat(name, " (", rank_list(v.any->members), ")");
    // The oldest collective some member submitted but has not finished.
    std::uint64_t oldest = 0;
    for (const auto& [r, c] : v.at)
      if (c->collectives_completed() < c->collectives) {
        const std::uint64_t s = c->collectives_completed() + 1;
        oldest = oldest ? std::min(oldest, s) : s;
      }
    if (oldest) {
      std::vector<int> in_it, absent, unknown;
      const op_record* what = nullptr;
      const comm_history* what_on = nullptr;
      for (int r : v.any->members) {
        auto it = v.at.find(r);
        if (it == v.at.end()) {
          if (by_rank.count(r))
            absent.push_back(r);  // a dump without the communicator: not created yet
          else
            unknown.push_back(r);
          continue;
        }
        if (it->second->collectives >= oldest) {
          in_it.push_back(r);
          if (!what) what = detail::find_collective(*it->second, oldest), what_on = it->second;
        } else {
          absent.push_back(r);
        }
      }
      std::string line = what ? detail::op_text(*what, *what_on) : cat("collective #", oldest);
      line += cat(" on ", where, ": ", rank_list(in_it), in_it.size() == 1 ? " waits" : " wait");
      if (what && what->started_ago >= 0) line += cat(" (for ", detail::seconds_text(what->started_ago), ")");
      if (!absent.empty())
        line += cat("; ", rank_list(absent), " did not reach ", what ? what->op : "it", " #", oldest, " on ", name);
      if (!unknown.empty()) line += cat("; ", rank_list(unknown), " unknown (no dump)");
      if (absent.empty() && unknown.empty())
        line += "; every member reached it: it is in progress, or MPI or the network is stuck";
      h.findings.push_back(line);
      for (int r : in_it) {
        const op_record* o = detail::find_collective(*v.at.at(r), oldest);
        if (o && !o->done()) h.waiting.push_back(r);
      }
      for (int r : absent) {
        h.not_reached.push_back(r);
        h.findings.push_back(cat("  rank ", r, ": ", detail::last_activity(*by_rank.at(r))));
      }
      // Members that reached the same position but called something else: mismatched order.
      std::vector<std::string> kinds;
      for (int r : in_it) {
        const op_record* o = detail::find_collective(*v.at.at(r), oldest);
        if (o && what && (o->op != what->op || o->count != what->count || o->peer != what->peer))
          kinds.push_back(cat("rank ", r, " called ", detail::op_text(*o, *v.at.at(r))));
      }
      if (!kinds.empty()) {
        std::string m = cat("  collective #", oldest, " on ", name, " differs across ranks: rank ", in_it.front(),
                            " called ", what ? detail::op_text(*what, *what_on) : "?");
        for (const auto& k : kinds) m += "; " + k;
        h.findings.push_back(m + " (the ranks call this communicator's collectives in different orders or sizes)");
      }
    }
    // Sends and receives that wait: a receive without its send, or the other way round.
    for (const auto& [r, c] : v.at)
      for (const auto& o : c->ops)
        if (o.seq == 0 && !o.done() && o.started_ago >= 0)
          h.findings.push_back(cat("rank ", r, " waits in ", detail::op_text(o, *c), " on ", where, " (for ",
                                   detail::seconds_text(o.started_ago), ")"));
  }
  std::sort(h.waiting.begin(), h.waiting.end());
  h.waiting.erase(std::unique(h.waiting.begin(), h.waiting.end()), h.waiting.end());
  std::sort(h.not_reached.begin(), h.not_reached.end());
  h.not_reached.erase(std::unique(h.not_reached.begin(), h.not_reached.end()), h.not_reached.end());
  if (h.findings.empty()) h.findings.push_back("no operation is pending on any communicator");
  return h;
}

}  // namespace strata
