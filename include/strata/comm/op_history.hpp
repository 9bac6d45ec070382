// What communicators did last: each one's recent operations with their sequence numbers
// and times, as one rank writes them when a collective times out or on SIGUSR1. Plain
// data, sent between ranks in a byte form and written to files as JSON (read back by
// comm/op_history_json.hpp), so a dump from a file diagnoses the same as one gathered
// from a live job (comm/hang_diagnosis.hpp). No JSON library here: every communicator
// includes this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/json_text.hpp"

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

namespace detail {

// The byte form: fixed-size values as their bytes, strings and vectors after their length.
class wire_writer {
 public:
  template <class T>
  requires std::is_arithmetic_v<T>
  void put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(std::string_view s) {
    put<std::uint64_t>(s.size());
    bytes.append(s);
  }
  std::string bytes;
};

// Reads what wire_writer wrote; any short or inconsistent input makes ok false.
class wire_reader {
 public:
  explicit wire_reader(std::string_view b) : b_(b) {}
  template <class T>
  requires std::is_arithmetic_v<T>
  T get() {
    T v{};
    if (!ok || b_.size() - at_ < sizeof v) {
      ok = false;
      return v;
    }
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const auto n = get<std::uint64_t>();
    if (!ok || n > b_.size() - at_) {
      ok = false;
      return {};
    }
    std::string s(b_.substr(at_, n));
    at_ += n;
    return s;
  }
  // A count of elements of at least `min_bytes` each: no more than the bytes left allow.
  std::size_t get_count(std::size_t min_bytes) {
    const auto n = get<std::uint64_t>();
    if (!ok || n > (b_.size() - at_) / min_bytes) ok = false;
    return ok ? static_cast<std::size_t>(n) : 0;
  }
  bool done() const { return ok && at_ == b_.size(); }
  bool ok = true;

 private:
  std::string_view b_;
  std::size_t at_ = 0;
};

}  // namespace detail

[[gnu::cold]] inline std::string to_wire(const rank_dump& d) {
  detail::wire_writer w;
  w.put(d.world_rank);
  w.put(d.world_size);
  w.put(d.host);
  w.put(d.pid);
  w.put(d.reason);
  w.put(d.taken_at);
  w.put<std::uint64_t>(d.comms.size());
  for (const auto& c : d.comms) {
    w.put(c.name);
    w.put(c.id);
    w.put<std::uint64_t>(c.members.size());
    for (int m : c.members) w.put(m);
    w.put(c.rank);
    w.put(c.submitted);
    w.put(c.completed);
    w.put(c.collectives);
    w.put<std::uint64_t>(c.ops.size());
    for (const auto& o : c.ops) {
      w.put(o.ticket);
      w.put(o.seq);
      w.put(o.op);
      w.put<std::uint64_t>(o.count);
      w.put<std::uint64_t>(o.bytes);
      w.put(o.peer);
      w.put(o.tag);
      w.put(o.enqueued_ago);
      w.put(o.started_ago);
      w.put(o.ended_ago);
    }
  }
  return std::move(w.bytes);
}

// False for bytes that are not a whole dump.
[[gnu::cold]] inline bool from_wire(std::string_view bytes, rank_dump& d) {
  detail::wire_reader r(bytes);
  d.world_rank = r.get<int>();
  d.world_size = r.get<int>();
  d.host = r.get_string();
  d.pid = r.get<long>();
  d.reason = r.get_string();
  d.taken_at = r.get<double>();
  d.comms.resize(r.get_count(8));
  for (auto& c : d.comms) {
    c.name = r.get_string();
    c.id = r.get<std::uint64_t>();
    c.members.resize(r.get_count(sizeof(int)));
    for (int& m : c.members) m = r.get<int>();
    c.rank = r.get<int>();
    c.submitted = r.get<std::uint64_t>();
    c.completed = r.get<std::uint64_t>();
    c.collectives = r.get<std::uint64_t>();
    c.ops.resize(r.get_count(8));
    for (auto& o : c.ops) {
      o.ticket = r.get<std::uint64_t>();
      o.seq = r.get<std::uint64_t>();
      o.op = r.get_string();
      o.count = static_cast<std::size_t>(r.get<std::uint64_t>());
      o.bytes = static_cast<std::size_t>(r.get<std::uint64_t>());
      o.peer = r.get<int>();
      o.tag = r.get<int>();
      o.enqueued_ago = r.get<double>();
      o.started_ago = r.get<double>();
      o.ended_ago = r.get<double>();
    }
  }
  return r.done();
}

// The dump as JSON text, the form of the rank-N.json files (comm/op_history_json.hpp reads it).
[[gnu::cold]] inline std::string to_json_text(const rank_dump& d) {
  std::string j;
  auto key = [&](const char* k) {
    if (j.back() != '{') j += ',';
    detail::append_json_string(j, k);
    j += ':';
  };
  auto num = [&](const char* k, double v) {
    key(k);
    detail::append_json_number(j, v);
  };
  auto str = [&](const char* k, const std::string& v) {
    key(k);
    detail::append_json_string(j, v);
  };
  j += '{';
  num("world_rank", d.world_rank);
  num("world_size", d.world_size);
  str("host", d.host);
  num("pid", static_cast<double>(d.pid));
  str("reason", d.reason);
  num("taken_at", d.taken_at);
  key("comms");
  j += '[';
  for (std::size_t i = 0; i < d.comms.size(); ++i) {
    const auto& c = d.comms[i];
    j += i ? ",{" : "{";
    str("name", c.name);
    key("id");
    j += std::to_string(c.id);  // all 64 bits: a double would round it
    key("members");
    j += '[';
    for (std::size_t m = 0; m < c.members.size(); ++m) {
      if (m) j += ',';
      j += std::to_string(c.members[m]);
    }
    j += ']';
    num("rank", c.rank);
    num("submitted", static_cast<double>(c.submitted));
    num("completed", static_cast<double>(c.completed));
    num("collectives", static_cast<double>(c.collectives));
    key("ops");
    j += '[';
    for (std::size_t k = 0; k < c.ops.size(); ++k) {
      const auto& o = c.ops[k];
      j += k ? ",{" : "{";
      num("ticket", static_cast<double>(o.ticket));
      num("seq", static_cast<double>(o.seq));
      str("op", o.op);
      num("count", static_cast<double>(o.count));
      num("bytes", static_cast<double>(o.bytes));
      num("peer", o.peer);
      num("tag", o.tag);
      num("enqueued_ago", o.enqueued_ago);
      num("started_ago", o.started_ago);
      num("ended_ago", o.ended_ago);
      j += '}';
    }
    j += "]}";
  }
  j += "]}";
  return j;
}

}  // namespace strata
