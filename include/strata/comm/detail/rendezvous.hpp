// A TCP rendezvous in the torchrun convention (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK): rank 0 listens, takes a blob from every rank, and once every rank has come
// (and no two name the same device) hands each its answer: its own bytes (the
// ncclUniqueId), every rank's blobs, or the part of every rank's blob that is for it (the
// addresses a host communicator without MPI connects by). Rank 0's side:
// rendezvous_server.hpp.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "../launch.hpp"
#include "lane.hpp"
#include "rendezvous_auth.hpp"
#include "rendezvous_server.hpp"
#include "rendezvous_socket.hpp"

namespace strata::detail {

struct rendezvous_config {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::chrono::duration<double> timeout{300.0};
  std::string secret;        // STRATA_JOB_SECRET(_FILE): empty, the rendezvous admits anyone
  bool bind_any = false;     // STRATA_RENDEZVOUS_BIND=any: rank 0 listens on every address
  bool bind_master = false;  // STRATA_RENDEZVOUS_BIND=master: on MASTER_ADDR's alone, whatever it is

  // The job secret and where rank 0 listens, from STRATA_JOB_SECRET(_FILE) and
  // STRATA_RENDEZVOUS_BIND: any, master, or unset (MASTER_ADDR's address, but every
  // address where MASTER_ADDR is a name for loopback in a job across machines).
  void security_from_env() {
    secret = job_secret_from_env();
    const char* bind = std::getenv("STRATA_RENDEZVOUS_BIND");
    const std::string b = bind ? bind : "";
    expects<config_error>(b.empty() || b == "any" || b == "master", [&] {
      return cat("STRATA_RENDEZVOUS_BIND=\"", b, "\": expected any (every local address) or master (MASTER_ADDR's)");
    });
    bind_any = b == "any";
    bind_master = b == "master";
  }

  // A launch's rendezvous (env or slurm: launch.hpp read MASTER_ADDR and the port, with
  // torchrun's agent store and STRATA_RENDEZVOUS_PORT); the time-out is STRATA_COMM_TIMEOUT's,
  // the job secret and the binding as security_from_env reads them.
  static rendezvous_config of(const launch_info& l) {
    rendezvous_config c;
    c.master_addr = l.master_addr;
    c.master_port = l.master_port;
    c.rank = l.rank;
    c.world_size = l.size;
    c.local_rank = l.local_rank;
    c.timeout = default_comm_timeout();
    c.security_from_env();
    return c;
  }

  // torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), read
  // as a launch by them is (detect_launch): one rule for the port, whoever asks. A
  // missing or malformed variable is a config_error naming it.
  static rendezvous_config from_env() {
    auto get = [](const char* n) -> const char* { return std::getenv(n); };
    return of(launch_reader<decltype(get)>{get}.env("RANK, WORLD_SIZE"));
  }
};

// Connects to rank 0 at host:port (retrying until the time-out, since rank 0 may start
// later), introduces itself as `rank` of `world_size` using device `key` with `blob`,
// proves the job secret where there is one, and returns rank 0's payload once every rank
// has come (with a secret, only a payload that rank 0 proved it sent).
inline std::vector<std::byte> rendezvous_fetch(const std::string& host, int port, int rank, int world_size,
                                               std::chrono::duration<double> timeout, const device_key& key = {},
                                               std::span<const std::byte> blob = {}, const std::string& secret = {}) {
  using namespace rendezvous_wire;
  timeout = checked_comm_timeout(timeout);
  const auto deadline = deadline_in(timeout);
  const std::string where = cat("rendezvous: rank ", rank, " with rank 0 at ", host, ":", port);
  std::string last = "no attempt";
  socket_fd s;
  auto pause = std::chrono::milliseconds(20);
  while (!s) {
    try {
      addr_list addrs(host, port, false);
      for (addrinfo* a = addrs.head; a && !s; a = a->ai_next) {
        socket_fd c(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
        if (!c) {
          last = errno_text(errno);
          continue;
        }
        set_nonblocking(c.get());
        if (::connect(c.get(), a->ai_addr, a->ai_addrlen) != 0) {
          if (errno != EINPROGRESS) {
            last = errno_text(errno);
            continue;
          }
          const auto attempt = std::min(deadline, rendezvous_clock::now() + std::chrono::seconds(2));
          if (!wait_ready(c.get(), POLLOUT, attempt)) {
            last = "connection attempt timed out";
            continue;
          }
          int err = 0;
          socklen_t len = sizeof err;
          ::getsockopt(c.get(), SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) {
            last = errno_text(err);
            continue;
          }
        }
        s = std::move(c);
      }
    } catch (const comm_error& e) {
      last = e.what();  // the name may resolve later (a pod whose DNS entry is not up yet)
    }
    if (s) break;
    const auto now = rendezvous_clock::now();
    if (now >= deadline)
      throw comm_error(cat(where, ": could not connect within ", timeout.count(), " s (last error: ", last,
                           "). Check that rank 0 is running and that MASTER_ADDR and MASTER_PORT point at it"));
    std::this_thread::sleep_for(std::min<rendezvous_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(500));
  }
  // Rank 0's own time-out starts when it serves, before it sends this rank its challenge:
  // waiting that long from then (and a margin) hears rank 0's answer, the list of the ranks
  // missing among others, rather than timing out first with nothing to say (this rank may
  // have started long before rank 0).
  auto answer_deadline = deadline_in(timeout + std::chrono::seconds(5));
  expects<comm_error>(blob.size() <= max_blob_bytes,
                      [&] { return cat(where, ": a blob of ", blob.size(), " bytes is over ", max_blob_bytes); });
  unsigned char preface[preface_bytes];
  put32(preface, magic);
  put32(preface + 4, version);
  put32(preface + 8, static_cast<std::uint32_t>(rank));
  put32(preface + 12, static_cast<std::uint32_t>(world_size));
  const rendezvous_nonce mine = make_nonce();
  std::copy(mine.begin(), mine.end(), preface + 16);
  send_all(s.get(), preface, preface_bytes, answer_deadline, where);
  unsigned char challenge[challenge_bytes];
  recv_all(s.get(), challenge, challenge_bytes, answer_deadline, where);
  answer_deadline = deadline_in(timeout + std::chrono::seconds(5));
  expects<comm_error>(get32(challenge) == magic,
                      [&] { return cat(where, ": the other side is not strata's rendezvous (check MASTER_PORT)"); });
  const bool needed = (get32(challenge + 4) & needs_secret) != 0;
  expects<config_error>(needed || secret.empty(), [&] {
    return cat(where,
               ": this rank has a job secret (STRATA_JOB_SECRET) and rank 0 has none: set the same one on "
               "every rank");
  });
  expects<config_error>(!needed || !secret.empty(), [&] {
    return cat(where,
               ": rank 0 admits only ranks that hold the job's secret: set STRATA_JOB_SECRET (or "
               "STRATA_JOB_SECRET_FILE) on this rank as on rank 0");
  });
  rendezvous_nonce theirs{};
  std::copy_n(challenge + 8, nonce_bytes, theirs.begin());
  std::vector<unsigned char> body(body_bytes + blob.size());
  put_key(body.data(), key);
  put32(body.data() + key_bytes, static_cast<std::uint32_t>(blob.size()));
  if (!blob.empty()) std::memcpy(body.data() + body_bytes, blob.data(), blob.size());
  const auto proof =
      prove(secret, std::string_view("strata rendezvous client"), std::span<const unsigned char>(preface), theirs,
            std::span<const unsigned char>(body.data(), key_bytes + 4), blob);
  std::copy(proof.begin(), proof.end(), body.begin() + key_bytes + 4);
  send_all(s.get(), body.data(), body.size(), answer_deadline, where);
  if (!wait_ready(s.get(), POLLIN, answer_deadline))
    throw comm_error(cat(where, ": rank 0 did not answer within ", timeout.count(),
                         " s (its own time-out) and 5 s more of this rank's hello; rank 0 has failed or stalled: "
                         "its output says why"));
  unsigned char head[reply_bytes];
  recv_all(s.get(), head, sizeof head, answer_deadline, where);
  // Lengths from a reply not proved yet: the message is text and short; the payload grows
  // only as its bytes arrive, so a stray answer cannot make this rank allocate gigabytes.
  const std::size_t message_bytes = get32(head + 4);
  const std::uint64_t payload_bytes = get64(head + 8);
  expects<comm_error>(message_bytes <= max_message_bytes, [&] {
    return cat(where, ": the other side is not strata's rendezvous (a message of ", message_bytes,
               " bytes; check MASTER_PORT)");
  });
  std::string message(message_bytes, '\0');
  if (!message.empty()) recv_all(s.get(), message.data(), message.size(), answer_deadline, where);
  std::vector<std::byte> payload;
  while (payload.size() < payload_bytes) {
    const std::size_t at = payload.size();
    payload.resize(static_cast<std::size_t>(std::min<std::uint64_t>(payload_bytes, at + (std::size_t{1} << 20))));
    recv_all(s.get(), payload.data() + at, payload.size() - at, answer_deadline, where);
  }
  expects<config_error>(get32(head) != rejected_config && get32(head) != rejected_secret,
                        [&] { return cat(where, ": ", message); });
  expects<comm_error>(get32(head) == ok, [&] { return cat(where, ": rank 0 rejected this rank: ", message); });
  if (!secret.empty()) {
    rendezvous_proof got;
    std::copy_n(head + 16, proof_bytes, got.begin());
    expects<config_error>(proofs_equal(got, prove(secret, std::string_view("strata rendezvous server"), mine, theirs,
                                                  std::span<const std::byte>(payload))),
                          [&] {
                            return cat(where,
                                       ": the reply did not prove the job secret (STRATA_JOB_SECRET): "
                                       "another process answered at MASTER_ADDR:MASTER_PORT");
                          });
  }
  return payload;
}

// Whether the launcher says every rank runs on this machine: torchrun's (and scripts/launch's)
// LOCAL_WORLD_SIZE equal to the world size, or Slurm's one node.
inline bool launched_on_one_machine(const rendezvous_config& c) {
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const char* nodes = std::getenv("SLURM_NNODES");
  return (local && std::to_string(c.world_size) == local) || (nodes && std::string_view(nodes) == "1");
}

// The loopback address MASTER_ADDR is here where it is a name for loopback on this machine
// (loopback_master_name: torchrun's c10d rendezvous gives rank 0's host name, which Debian
// and Ubuntu map to 127.0.1.1) and the launcher does not say the job is on this machine
// alone; empty otherwise. Ranks on other machines could not reach loopback, so rank 0 then
// listens on every address and this machine's Gloo devices open on its first network
// interface (decision 0047).
inline std::string loopback_master_of_spanning_job(const rendezvous_config& c) {
  return launched_on_one_machine(c) ? std::string() : loopback_master_name(c.master_addr);
}

// Rank 0's server for a config: on every address MASTER_ADDR resolves to, or every address with
// STRATA_RENDEZVOUS_BIND=any or where MASTER_ADDR is a name for loopback here in a job
// that may span machines (unless STRATA_RENDEZVOUS_BIND=master); with the job secret. It
// says once where it listens and why, and whether the rendezvous is open to anyone who
// reaches it.
inline rendezvous_server rendezvous_host(const rendezvous_config& c) {
  const std::string loopback = c.bind_any || c.bind_master ? std::string() : loopback_master_of_spanning_job(c);
  const bool every = c.bind_any || !loopback.empty();
  if (!every) wait_until_resolves(c.master_addr, deadline_in(c.timeout));
  rendezvous_server server(c.master_port, every ? std::string() : c.master_addr, c.secret);
  static std::once_flag said;
  std::call_once(said, [&] {
    std::string why =
        c.bind_any ? "STRATA_RENDEZVOUS_BIND=any" : "MASTER_ADDR; STRATA_RENDEZVOUS_BIND=any for every address";
    if (!loopback.empty()) {
      const char* ifname = gloo_ifname_from_env();
      const network_interface net = first_network_interface();
      why = cat("MASTER_ADDR=\"", c.master_addr, "\" is ", loopback,
                " here, loopback, and the launcher does not say the job is on this machine alone, so every address; "
                "STRATA_RENDEZVOUS_BIND=master for MASTER_ADDR's alone",
                ifname ? std::string()
                : net.name.empty()
                    ? std::string("; this machine has no other network interface: Gloo stays on loopback")
                    : cat("; Gloo here opens on ", net.name, " (", net.address, "), STRATA_GLOO_IFNAME names another"));
    }
    std::fprintf(stderr, "strata: rendezvous on %s (%s)%s\n", server.where().c_str(), why.c_str(),
                 c.secret.empty() ? "; open to any process that reaches it: set STRATA_JOB_SECRET on every rank to "
                                    "admit only this job's"
                                  : "; ranks prove the job secret");
    std::fflush(stderr);
  });
  return server;
}

// Every rank calls this: rank 0 serves `payload` (others pass an empty span) and
// returns it; every other rank returns the bytes rank 0 served. `key` is the device this
// rank will use (two ranks with one key are a config_error on every rank).
inline std::vector<std::byte> rendezvous_broadcast(const rendezvous_config& c, std::span<const std::byte> payload,
                                                   const device_key& key = {}, const std::string& comm = "nccl") {
  if (c.world_size == 1) return {payload.begin(), payload.end()};  // nobody to meet: no socket, no address
  if (c.rank == 0) {
    rendezvous_server server = rendezvous_host(c);
    server.serve(payload, c.world_size, c.timeout, key, comm);
    return {payload.begin(), payload.end()};
  }
  return rendezvous_fetch(c.master_addr, c.master_port, c.rank, c.world_size, c.timeout, key, {}, c.secret);
}

namespace rendezvous_wire {
// Parts as one payload: each a 4-byte length and its bytes.
inline std::vector<std::byte> pack(const std::vector<std::span<const std::byte>>& parts) {
  std::size_t n = 0;
  for (const auto& b : parts) n += 4 + b.size();
  std::vector<std::byte> out(n);
  std::size_t at = 0;
  for (const auto& b : parts) {
    put32(reinterpret_cast<unsigned char*>(out.data() + at), static_cast<std::uint32_t>(b.size()));
    if (!b.empty()) std::memcpy(out.data() + at + 4, b.data(), b.size());
    at += 4 + b.size();
  }
  return out;
}

// pack's inverse, for a world of `world_size`: anything else is a comm_error.
inline std::vector<std::vector<std::byte>> unpack(const std::vector<std::byte>& packed, int world_size) {
  std::vector<std::vector<std::byte>> parts;
  std::size_t at = 0;
  while (at + 4 <= packed.size() && parts.size() < static_cast<std::size_t>(world_size)) {
    const std::size_t n = get32(reinterpret_cast<const unsigned char*>(packed.data() + at));
    expects<comm_error>(n <= packed.size() - at - 4, "rendezvous: rank 0 sent a truncated list of blobs");
    parts.emplace_back(packed.begin() + static_cast<std::ptrdiff_t>(at + 4),
                       packed.begin() + static_cast<std::ptrdiff_t>(at + 4 + n));
    at += 4 + n;
  }
  expects<comm_error>(parts.size() == static_cast<std::size_t>(world_size) && at == packed.size(), [&] {
    return cat("rendezvous: rank 0 sent ", parts.size(), " blobs for a world of ", world_size,
               " (ranks built from different strata versions?)");
  });
  return parts;
}
}  // namespace rendezvous_wire

// Every rank calls this with its own blob; rank 0 (`serve` with its server) or the fetch
// makes this rank's packed payload, unpacked here into one part per rank.
template <class Serve>
std::vector<std::vector<std::byte>> rendezvous_exchange(const rendezvous_config& c, std::span<const std::byte> blob,
                                                        Serve&& serve) {
  if (c.world_size == 1) return {std::vector<std::byte>(blob.begin(), blob.end())};
  std::vector<std::byte> packed;
  if (c.rank == 0) {
    rendezvous_server server = rendezvous_host(c);
    packed = serve(server);
  } else {
    packed = rendezvous_fetch(c.master_addr, c.master_port, c.rank, c.world_size, c.timeout, {}, blob, c.secret);
  }
  return rendezvous_wire::unpack(packed, c.world_size);
}

// Every rank calls this with its own blob; each returns every rank's blob, in rank order
// (an all-gather through rank 0, for bootstraps with no communicator yet).
inline std::vector<std::vector<std::byte>> rendezvous_all_gather(const rendezvous_config& c,
                                                                 std::span<const std::byte> blob,
                                                                 const std::string& comm) {
  return rendezvous_exchange(c, blob, [&](rendezvous_server& server) {
    return server.serve_with(c.world_size, c.timeout, {}, comm, blob, [](const std::vector<std::vector<std::byte>>& b) {
      return rendezvous_wire::pack({b.begin(), b.end()});
    });
  });
}

// Every rank calls this with `parts`: world_size parts of equal size, the r-th for rank r.
// Each returns, in rank order, the part every rank made for it (an all-to-all through rank
// 0). A rank receives its column alone: at W ranks, W parts rather than W^2 (a host
// communicator's addresses for a pair each: 200 bytes, 820 MB a rank at 2048 ranks as an
// all-gather, 400 KB this way).
inline std::vector<std::vector<std::byte>> rendezvous_all_to_all(const rendezvous_config& c,
                                                                 std::span<const std::byte> parts,
                                                                 const std::string& comm) {
  const auto w = static_cast<std::size_t>(c.world_size);
  expects<comm_error>(parts.size() % w == 0, [&] {
    return cat("rendezvous all-to-all of ", comm, ": ", parts.size(), " bytes is not ", w, " equal parts");
  });
  return rendezvous_exchange(c, parts, [&](rendezvous_server& server) {
    return server.serve_each(c.world_size, c.timeout, {}, comm, parts,
                             [&](const std::vector<std::vector<std::byte>>& blobs, int r) {
                               std::vector<std::span<const std::byte>> column;
                               for (const auto& b : blobs) {
                                 // A blob that is not world_size equal parts gives an empty part: its receiver names
                                 // it.
                                 const std::size_t n = b.size() % w == 0 ? b.size() / w : 0;
                                 column.push_back(std::span(b).subspan(static_cast<std::size_t>(r) * n, n));
                               }
                               return rendezvous_wire::pack(column);
                             });
  });
}

}  // namespace strata::detail
