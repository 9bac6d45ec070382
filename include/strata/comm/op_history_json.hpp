// Reading the rank-N.json files of hang reports (comm/op_history.hpp writes them) with
// nlohmann::json: for scripts/diagnose's tool and tests, kept out of the communicators'
// headers.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "op_history.hpp"

namespace strata {

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
