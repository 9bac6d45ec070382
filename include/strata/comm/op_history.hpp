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

// JSON of each: every field under its own name (a missing one is an error when read).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(op_record, ticket, seq, op, count, bytes, peer, tag, enqueued_ago, started_ago,
                                   ended_ago)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(comm_history, name, id, members, rank, submitted, completed, collectives, ops)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(rank_dump, world_rank, world_size, host, pid, reason, taken_at, comms)

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
