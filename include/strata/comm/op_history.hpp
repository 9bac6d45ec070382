// What communicators did last: each one's recent operations with their sequence numbers
// and times, as one rank writes them when a collective times out or on SIGUSR1. Plain
// data with a JSON form, so a dump read back from a file diagnoses the same as one
// gathered from a live job (comm/hang_diagnosis.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"

namespace strata {

struct op_record {
  std::uint64_t ticket = 0;  // position among all of the communicator's operations, from 1
  std::uint64_t seq = 0;     // position among its collectives, from 1; 0 for a send or recv
  std::string op;            // "all_reduce", "send", ...
  std::size_t count = 0;     // elements the caller passed
  std::size_t bytes = 0;
  int peer = -1;  // send/recv: the other side, broadcast: the root (ranks of the communicator)
  int tag = -1;
  // Seconds before the dump was taken; negative where it has not happened yet.
  double enqueued_ago = -1, started_ago = -1, ended_ago = -1;
  bool done() const { return ended_ago >= 0; }
};

struct comm_history {
  std::string name;
  std::uint64_t id = 0;                        // the same on every member, different for every communicator
  std::vector<int> members;                    // world ranks, in the communicator's rank order
  int rank = 0;                                // this process's rank in it
  std::uint64_t submitted = 0, completed = 0;  // tickets: completion is in ticket order
  std::uint64_t collectives = 0;               // collectives submitted
  std::vector<op_record> ops;                  // the last ones (up to 64), oldest first

  // Collectives that completed: those submitted, less those in `ops` that have not.
  std::uint64_t collectives_completed() const {
    std::uint64_t open = 0;
    for (const auto& o : ops) open += o.seq != 0 && o.ticket > completed;
    return collectives - open;
  }
};

struct rank_dump {
  int world_rank = 0, world_size = 1;
  std::string host;
  long pid = 0;
  std::string reason;   // "time-out", "SIGUSR1", "asked by rank 3"
  double taken_at = 0;  // seconds since the Unix epoch
  std::vector<comm_history> comms;
};

inline void to_json(nlohmann::json& j, const op_record& o) {
  j = {{"ticket", o.ticket},
       {"seq", o.seq},
       {"op", o.op},
       {"count", o.count},
       {"bytes", o.bytes},
       {"peer", o.peer},
       {"tag", o.tag},
       {"enqueued_ago", o.enqueued_ago},
       {"started_ago", o.started_ago},
       {"ended_ago", o.ended_ago}};
}
inline void from_json(const nlohmann::json& j, op_record& o) {
  j.at("ticket").get_to(o.ticket);
  j.at("seq").get_to(o.seq);
  j.at("op").get_to(o.op);
  j.at("count").get_to(o.count);
  j.at("bytes").get_to(o.bytes);
  j.at("peer").get_to(o.peer);
  j.at("tag").get_to(o.tag);
  j.at("enqueued_ago").get_to(o.enqueued_ago);
  j.at("started_ago").get_to(o.started_ago);
  j.at("ended_ago").get_to(o.ended_ago);
}
inline void to_json(nlohmann::json& j, const comm_history& c) {
  j = {{"name", c.name},
       {"id", c.id},
       {"members", c.members},
       {"rank", c.rank},
       {"submitted", c.submitted},
       {"completed", c.completed},
       {"collectives", c.collectives},
       {"ops", c.ops}};
}
inline void from_json(const nlohmann::json& j, comm_history& c) {
  j.at("name").get_to(c.name);
  j.at("id").get_to(c.id);
  j.at("members").get_to(c.members);
  j.at("rank").get_to(c.rank);
  j.at("submitted").get_to(c.submitted);
  j.at("completed").get_to(c.completed);
  j.at("collectives").get_to(c.collectives);
  j.at("ops").get_to(c.ops);
}
inline void to_json(nlohmann::json& j, const rank_dump& d) {
  j = {{"world_rank", d.world_rank}, {"world_size", d.world_size}, {"host", d.host},  {"pid", d.pid},
       {"reason", d.reason},         {"taken_at", d.taken_at},     {"comms", d.comms}};
}
inline void from_json(const nlohmann::json& j, rank_dump& d) {
  j.at("world_rank").get_to(d.world_rank);
  j.at("world_size").get_to(d.world_size);
  j.at("host").get_to(d.host);
  j.at("pid").get_to(d.pid);
  j.at("reason").get_to(d.reason);
  j.at("taken_at").get_to(d.taken_at);
  j.at("comms").get_to(d.comms);
}

// Reads one rank's dump from its JSON text; `where` (a file name) prefixes any error.
inline rank_dump parse_rank_dump(const std::string& text, const std::string& where) {
  try {
    auto d = nlohmann::json::parse(text).get<rank_dump>();
    expects<config_error>(d.world_size > 0 && d.world_rank >= 0 && d.world_rank < d.world_size, [&] {
      return cat("world_rank ", d.world_rank, " is not a rank of a world of ", d.world_size);
    });
    for (const auto& c : d.comms)
      expects<config_error>(c.rank >= 0 && static_cast<std::size_t>(c.rank) < c.members.size() &&
                                c.members[static_cast<std::size_t>(c.rank)] == d.world_rank,
                            [&] {
                              return cat("communicator ", c.name, " does not list world rank ", d.world_rank,
                                         " at its rank ", c.rank);
                            });
    return d;
  } catch (const nlohmann::json::exception& e) {
    throw config_error(cat(where, ": not a strata operation dump: ", e.what()));
  } catch (const config_error& e) {
    throw config_error(cat(where, ": ", e.what()));
  }
}

}  // namespace strata
