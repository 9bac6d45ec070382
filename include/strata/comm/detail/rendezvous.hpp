// A TCP rendezvous in the torchrun convention (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK): rank 0 listens, takes a blob from every rank, and once every rank has come
// (and no two name the same device) hands each the same bytes: its own (the ncclUniqueId)
// or every rank's blobs (the addresses a host communicator without MPI connects by).
#pragma once
#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "../launch.hpp"
#include "lane.hpp"
#include "rendezvous_auth.hpp"
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

// The device a rank will use, for the check that no two ranks share one: its node's name
// and the device's address there (a PCI bus id). Both empty: nothing to check.
struct device_key {
  std::string node, device;
  bool empty() const noexcept { return node.empty() && device.empty(); }
  bool operator==(const device_key&) const = default;
};

// Two ranks a < b that name the same non-empty device, if any (the first two of the
// lowest such device): sorted, not compared pairwise, since a world may hold thousands.
inline std::optional<std::pair<int, int>> find_shared_device(const std::vector<device_key>& keys) {
  std::vector<int> order(keys.size());
  for (std::size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  const auto key = [&](int r) -> const device_key& { return keys[static_cast<std::size_t>(r)]; };
  // Stable: the ranks of one device stay in ascending order.
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return std::tie(key(a).node, key(a).device) < std::tie(key(b).node, key(b).device);
  });
  for (std::size_t i = 1; i < order.size(); ++i)
    if (!key(order[i]).empty() && key(order[i]) == key(order[i - 1])) return std::pair{order[i - 1], order[i]};
  return std::nullopt;
}

// What every rank is told when two ranks name one GPU (here and in the MPI bootstrap's
// check, comm/nccl.hpp).
inline std::string duplicate_gpu_message(const std::string& comm, int a, int b, const device_key& k) {
  return cat("nccl communicator ", comm, ": ranks ", a, " and ", b, " both use the GPU at PCI ", k.device, " on node ",
             k.node,
             ", and NCCL needs one GPU per process. Start at most one process per GPU on each node, give each "
             "process its own device through CUDA_VISIBLE_DEVICES, or (under MPI) set STRATA_DEVICE_COMM=mpi to "
             "share a GPU through MPI (slower: for tests and clusters without NCCL)");
}

namespace rendezvous_wire {
inline constexpr std::uint32_t magic = 0x53545241u;  // "STRA"
// 2: a device_key; 3: a blob after the hello; 4: nonces, a challenge and proofs of the secret
inline constexpr std::uint32_t version = 4;
// A rejection for a duplicate device or a wrong secret is a config_error; others are comm_errors.
inline constexpr std::uint32_t ok = 0, rejected = 1, rejected_config = 2, rejected_secret = 3;
inline constexpr std::uint32_t needs_secret = 1;  // the challenge's flag
inline constexpr std::size_t node_bytes = 64, device_bytes = 32, key_bytes = node_bytes + device_bytes;
// The client's preface (magic, version, rank, world size, its nonce), the server's
// challenge (magic, flags, its nonce), the client's body (device key, blob length,
// proof; the blob follows) and the server's reply head (status, lengths, proof).
inline constexpr std::size_t preface_bytes = 16 + nonce_bytes, challenge_bytes = 8 + nonce_bytes,
                             body_bytes = key_bytes + 4 + proof_bytes, reply_bytes = 12 + proof_bytes;
// A rank's blob is at most this (a host communicator's addresses: about 130 bytes a peer).
inline constexpr std::size_t max_blob_bytes = std::size_t{64} << 20;

inline void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<unsigned char>(v & 0xffu);
}
inline std::uint32_t get32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
// A device_key as node_bytes + device_bytes of NUL-padded text (longer names are cut).
inline void put_key(unsigned char* p, const device_key& k) {
  std::memset(p, 0, node_bytes + device_bytes);
  std::memcpy(p, k.node.data(), std::min(k.node.size(), node_bytes - 1));
  std::memcpy(p + node_bytes, k.device.data(), std::min(k.device.size(), device_bytes - 1));
}
inline device_key get_key(const unsigned char* p) {
  const auto text = [](const unsigned char* at, std::size_t n) {
    const auto* c = reinterpret_cast<const char*>(at);
    return std::string(c, strnlen(c, n));
  };
  return {text(p, node_bytes), text(p + node_bytes, device_bytes)};
}
}  // namespace rendezvous_wire

// Rank 0's side. Binds at construction (port 0 picks a free port, see port()), so the
// other ranks may start connecting before serve() is called. With a secret, a connection
// is admitted only once it proved it knows it.
class rendezvous_server {
 public:
  // host empty: every local address (IPv6 and IPv4 where the system allows both).
  explicit rendezvous_server(int port, const std::string& host = "", std::string secret = "")
      : host_(host), secret_(std::move(secret)) {
    std::string last = "no address to bind";
    addr_list addrs(host, port, true);
    // Prefer an IPv6 socket that also takes IPv4 clients; fall back to whatever binds.
    std::vector<addrinfo*> order;
    for (addrinfo* a = addrs.head; a; a = a->ai_next) order.push_back(a);
    std::stable_sort(order.begin(), order.end(), [](const addrinfo* a, const addrinfo* b) {
      return a->ai_family == AF_INET6 && b->ai_family != AF_INET6;
    });
    for (addrinfo* a : order) {
      socket_fd s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
      if (!s) {
        last = errno_text(errno);
        continue;
      }
      const int one = 1, zero = 0;
      ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (a->ai_family == AF_INET6) ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
      if (::bind(s.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(s.get(), 128) != 0) {
        last = errno_text(errno);
        continue;
      }
      set_nonblocking(s.get());
      fd_ = std::move(s);
      break;
    }
    expects<comm_error>(static_cast<bool>(fd_), [&] {
      return cat("rendezvous: rank 0 cannot listen on ", host.empty() ? std::string("port ") : host + " port ", port,
                 ": ", last,
                 " (is another job using MASTER_PORT? pick a free port; STRATA_RENDEZVOUS_BIND=any listens on every "
                 "address)");
    });
  }

  int port() const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw comm_error(cat("rendezvous: getsockname failed: ", errno_text(errno)));
    if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  }
  // How long one connection may take over its hello before it is dropped.
  void set_hello_limit(std::chrono::duration<double> t) { hello_limit_ = t; }
  // Where it listens, for the launch line: "host:port", or "*:port" for every address.
  std::string where() const { return cat(host_.empty() ? std::string("*") : host_, ":", port()); }

  // Waits for ranks 1 .. world_size - 1, each holding its connection, then checks that
  // no two ranks (rank 0 with `own` among them) name the same device and sends each the
  // payload. A rank that did not come within the time-out is a comm_error here, and every
  // rank that came is told the same; a shared device is a config_error on every rank. A
  // connection that speaks another protocol, fails the secret's proof, stalls in its hello,
  // disagrees on the world size or claims a rank out of range or taken is refused, told why
  // where it speaks the protocol, logged, and the wait goes on.
  void serve(std::span<const std::byte> payload, int world_size, std::chrono::duration<double> timeout,
             const device_key& own = {}, const std::string& comm = "nccl") {
    serve_with(world_size, timeout, own, comm, {},
               [&](const auto&) { return std::vector<std::byte>(payload.begin(), payload.end()); });
  }

  // The same, but each rank's blob (`own_blob` for rank 0) is kept, and every rank is sent
  // `payload_of(blobs)`, which serve_with also returns.
  template <class Payload>
  std::vector<std::byte> serve_with(int world_size, std::chrono::duration<double> timeout, const device_key& own,
                                    const std::string& comm, std::span<const std::byte> own_blob,
                                    Payload&& payload_of) {
    using namespace rendezvous_wire;
    const auto deadline = deadline_in(timeout);
    raise_open_file_limit(static_cast<rlim_t>(world_size) + 64);  // one held connection per rank
    std::vector<admitted> held(static_cast<std::size_t>(world_size));
    held[0].key = own;
    held[0].blob.assign(own_blob.begin(), own_blob.end());
    // Tells every rank that came the problem, then throws it: a config_error as it is, a
    // comm_error after `prefix`.
    const auto reject_all = [&](std::uint32_t status, const std::string& problem, const char* prefix) {
      for (auto& h : held)
        if (h.fd) try_reply(h.fd.get(), status, problem, deadline);
      if (status == rejected_config) throw config_error(problem);
      throw comm_error(cat(prefix, problem));
    };
    int missing = world_size - 1;
    for (;;) {
      // A rank whose process died after its hello (a pod restarted while the job gathers)
      // gives up its place before the others are told to go on, and the job waits for its
      // new process rather than go on without it.
      if (missing == 0) {
        for (std::size_t r = 1; r < held.size(); ++r)
          if (held[r].fd && closed_by_peer(held[r].fd.get())) {
            std::fprintf(stderr,
                         "strata: rendezvous (rank 0, %s): rank %zu's connection closed before the job "
                         "began; waiting for it again\n",
                         where().c_str(), r);
            std::fflush(stderr);
            held[r] = admitted{};
            ++missing;
          }
        if (missing == 0) break;
      }
      if (!wait_ready(fd_.get(), POLLIN, deadline)) {
        std::string ranks;
        for (int r = 1; r < world_size; ++r)
          if (!held[static_cast<std::size_t>(r)].fd) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        reject_all(rejected,
                   cat("rank 0 (port ", port(), ") waited ", timeout.count(), " s; rank(s) ", ranks, " of ", world_size,
                       " did not connect. Check that every rank was started with the same MASTER_ADDR, MASTER_PORT "
                       "and WORLD_SIZE (STRATA_COMM_TIMEOUT sets the time-out)"),
                   "rendezvous: ");
      }
      sockaddr_storage from{};
      socklen_t from_len = sizeof from;
      socket_fd c(::accept(fd_.get(), reinterpret_cast<sockaddr*>(&from), &from_len));
      if (!c && (errno == EMFILE || errno == ENFILE))
        reject_all(rejected,
                   cat("rank 0 cannot hold the connections of ", world_size - 1, " ranks: ", errno_text(errno),
                       " (raise the open-file limit: ulimit -n)"),
                   "rendezvous: ");
      if (!c) continue;  // the client gave up between poll and accept, or EINTR
      set_nonblocking(c.get());
      admitted a;
      a.fd = std::move(c);
      const std::string refusal =
          admit(a, world_size, held,
                std::min(deadline, rendezvous_clock::now() +
                                       std::chrono::duration_cast<rendezvous_clock::duration>(hello_limit_)));
      if (!refusal.empty()) {
        std::fprintf(stderr, "strata: rendezvous (rank 0, %s): refused a connection from %s: %s\n", where().c_str(),
                     address_text(from).c_str(), refusal.c_str());
        std::fflush(stderr);
        continue;
      }
      const auto r = static_cast<std::size_t>(a.rank);
      // A rank whose earlier process died after its hello takes its place again: admit()
      // let it in only where that connection had ended.
      if (held[r].fd) {
        std::fprintf(stderr,
                     "strata: rendezvous (rank 0, %s): rank %zu's earlier connection had closed; %s takes its "
                     "place\n",
                     where().c_str(), r, address_text(from).c_str());
        std::fflush(stderr);
      } else {
        --missing;
      }
      held[r] = std::move(a);
    }
    std::vector<device_key> keys;
    for (const auto& h : held) keys.push_back(h.key);
    if (const auto shared = find_shared_device(keys))
      reject_all(
          rejected_config,
          duplicate_gpu_message(comm, shared->first, shared->second, keys[static_cast<std::size_t>(shared->first)]),
          "");
    std::vector<std::vector<std::byte>> blobs;
    for (auto& h : held) blobs.push_back(std::move(h.blob));
    std::vector<std::byte> payload = payload_of(std::as_const(blobs));
    for (auto& h : held)
      if (h.fd)
        reply(h.fd.get(), ok, {}, payload, deadline,
              prove(secret_, std::string_view("strata rendezvous server"), h.client_nonce, h.server_nonce, payload));
    return payload;
  }

 private:
  struct admitted {
    socket_fd fd;
    int rank = 0;
    device_key key;
    std::vector<std::byte> blob;
    rendezvous_nonce client_nonce{}, server_nonce{};
  };

  // Runs one connection's hello; empty when `a` is admitted as a rank, else why not (the
  // connection is told, where it speaks the protocol, and closed).
  std::string admit(admitted& a, int world_size, const std::vector<admitted>& held,
                    rendezvous_clock::time_point hello_deadline) {
    using namespace rendezvous_wire;
    const int fd = a.fd.get();
    try {
      unsigned char preface[preface_bytes];
      recv_all(fd, preface, preface_bytes, hello_deadline, "hello");
      if (get32(preface) != magic || get32(preface + 4) != version)
        return "not strata's rendezvous (another protocol, or another strata version)";
      std::copy_n(preface + 16, nonce_bytes, a.client_nonce.begin());
      a.server_nonce = make_nonce();
      unsigned char challenge[challenge_bytes];
      put32(challenge, magic);
      put32(challenge + 4, secret_.empty() ? 0 : needs_secret);
      std::copy(a.server_nonce.begin(), a.server_nonce.end(), challenge + 8);
      send_all(fd, challenge, challenge_bytes, hello_deadline, "challenge");
      unsigned char body[body_bytes];
      recv_all(fd, body, body_bytes, hello_deadline, "hello");
      const std::uint32_t n = get32(body + key_bytes);
      if (n > max_blob_bytes) return cat("a blob of ", n, " bytes (at most ", max_blob_bytes, ")");
      a.blob.resize(n);
      if (n) recv_all(fd, a.blob.data(), n, hello_deadline, "hello");
      rendezvous_proof proof;
      std::copy_n(body + key_bytes + 4, proof_bytes, proof.begin());
      if (!secret_.empty() &&
          !proofs_equal(proof, prove(secret_, std::string_view("strata rendezvous client"),
                                     std::span<const unsigned char>(preface), a.server_nonce,
                                     std::span<const unsigned char>(body, key_bytes + 4), a.blob))) {
        try_reply(fd, rejected_secret,
                  "rank 0 refused this rank's proof of the job secret: set the same STRATA_JOB_SECRET (or "
                  "STRATA_JOB_SECRET_FILE) on every rank",
                  hello_deadline);
        return "it failed the proof of the job secret (STRATA_JOB_SECRET)";
      }
      a.rank = static_cast<int>(get32(preface + 8));
      const int world = static_cast<int>(get32(preface + 12));
      a.key = get_key(body);
      std::string problem;
      if (world != world_size)
        problem = cat("rank ", a.rank, " says WORLD_SIZE=", world, ", rank 0 has WORLD_SIZE=", world_size);
      else if (a.rank <= 0 || a.rank >= world_size)
        problem = cat("rank ", a.rank, " is not a rank in 1..", world_size - 1);
      else if (held[static_cast<std::size_t>(a.rank)].fd &&
               !closed_by_peer(held[static_cast<std::size_t>(a.rank)].fd.get()))
        problem = cat("rank ", a.rank, " has come already (two processes with the same RANK?)");
      if (!problem.empty()) {
        try_reply(fd, rejected, cat("rank 0 refused this rank: ", problem), hello_deadline);
        return problem;
      }
      return {};
    } catch (const comm_error& e) {
      const bool stalled = std::string_view(e.what()).find("timed out") != std::string_view::npos;
      return stalled ? cat("its hello did not finish within ", hello_limit_.count(), " s")
                     : cat("its hello broke off (", e.what(), ")");
    }
  }

  static std::string address_text(const sockaddr_storage& a) {
    char text[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (a.ss_family == AF_INET6) {
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&a);
      ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
      port = ntohs(v6->sin6_port);
    } else if (a.ss_family == AF_INET) {
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a);
      ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
      port = ntohs(v4->sin_port);
    }
    return cat(text, ":", port);
  }

  static void reply(int fd, std::uint32_t status, const std::string& message, std::span<const std::byte> payload,
                    rendezvous_clock::time_point deadline, const rendezvous_proof& proof = {}) {
    using namespace rendezvous_wire;
    std::vector<unsigned char> out(reply_bytes + message.size() + payload.size());
    put32(out.data(), status);
    put32(out.data() + 4, static_cast<std::uint32_t>(message.size()));
    put32(out.data() + 8, static_cast<std::uint32_t>(payload.size()));
    std::copy(proof.begin(), proof.end(), out.begin() + 12);
    std::copy(message.begin(), message.end(), out.begin() + reply_bytes);
    if (!payload.empty()) std::memcpy(out.data() + reply_bytes + message.size(), payload.data(), payload.size());
    send_all(fd, out.data(), out.size(), deadline, "rendezvous: rank 0 replying");
  }

  // The soft open-file limit raised to `needed` where the hard limit allows (a shell's
  // default of 1024 would stop a world of a few thousand ranks at accept).
  static void raise_open_file_limit(rlim_t needed) {
    rlimit l{};
    if (::getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur == RLIM_INFINITY || l.rlim_cur >= needed) return;
    l.rlim_cur = l.rlim_max == RLIM_INFINITY ? needed : std::min(needed, l.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &l);  // where it is refused, accept's EMFILE says so
  }

  // A rejection to a connection that may have given up already: its own time-out tells it.
  static void try_reply(int fd, std::uint32_t status, const std::string& message,
                        rendezvous_clock::time_point deadline) {
    try {
      reply(fd, status, message, {}, deadline);
    } catch (const comm_error&) {
    }
  }

  socket_fd fd_;
  std::string host_;
  std::string secret_;
  std::chrono::duration<double> hello_limit_{10.0};
};

// Connects to rank 0 at host:port (retrying until the time-out, since rank 0 may start
// later), introduces itself as `rank` of `world_size` using device `key` with `blob`,
// proves the job secret where there is one, and returns rank 0's payload once every rank
// has come (with a secret, only a payload that rank 0 proved it sent).
inline std::vector<std::byte> rendezvous_fetch(const std::string& host, int port, int rank, int world_size,
                                               std::chrono::duration<double> timeout, const device_key& key = {},
                                               std::span<const std::byte> blob = {}, const std::string& secret = {}) {
  using namespace rendezvous_wire;
  const auto start = rendezvous_clock::now();
  const auto deadline = start + std::chrono::duration_cast<rendezvous_clock::duration>(timeout);
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
  expects<comm_error>(blob.size() <= max_blob_bytes,
                      [&] { return cat(where, ": a blob of ", blob.size(), " bytes is over ", max_blob_bytes); });
  unsigned char preface[preface_bytes];
  put32(preface, magic);
  put32(preface + 4, version);
  put32(preface + 8, static_cast<std::uint32_t>(rank));
  put32(preface + 12, static_cast<std::uint32_t>(world_size));
  const rendezvous_nonce mine = make_nonce();
  std::copy(mine.begin(), mine.end(), preface + 16);
  send_all(s.get(), preface, preface_bytes, deadline, where);
  unsigned char challenge[challenge_bytes];
  recv_all(s.get(), challenge, challenge_bytes, deadline, where);
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
  send_all(s.get(), body.data(), body.size(), deadline, where);
  unsigned char head[reply_bytes];
  recv_all(s.get(), head, sizeof head, deadline, where);
  std::string message(get32(head + 4), '\0');
  std::vector<std::byte> payload(get32(head + 8));
  if (!message.empty()) recv_all(s.get(), message.data(), message.size(), deadline, where);
  if (!payload.empty()) recv_all(s.get(), payload.data(), payload.size(), deadline, where);
  expects<config_error>(get32(head) != rejected_config && get32(head) != rejected_secret,
                        [&] { return cat(where, ": ", message); });
  expects<comm_error>(get32(head) == ok, [&] { return cat(where, ": rank 0 rejected this rank: ", message); });
  if (!secret.empty()) {
    rendezvous_proof got;
    std::copy_n(head + 12, proof_bytes, got.begin());
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

// Rank 0's server for a config: on MASTER_ADDR's address, or every address with
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

// Every rank calls this with its own blob; each returns every rank's blob, in rank order
// (an all-gather through rank 0, for bootstraps with no communicator yet).
inline std::vector<std::vector<std::byte>> rendezvous_all_gather(const rendezvous_config& c,
                                                                 std::span<const std::byte> blob,
                                                                 const std::string& comm) {
  using namespace rendezvous_wire;
  // The payload: each blob as a 4-byte length and its bytes.
  const auto pack = [](const std::vector<std::vector<std::byte>>& blobs) {
    std::size_t n = 0;
    for (const auto& b : blobs) n += 4 + b.size();
    std::vector<std::byte> out(n);
    std::size_t at = 0;
    for (const auto& b : blobs) {
      put32(reinterpret_cast<unsigned char*>(out.data() + at), static_cast<std::uint32_t>(b.size()));
      std::memcpy(out.data() + at + 4, b.data(), b.size());
      at += 4 + b.size();
    }
    return out;
  };
  if (c.world_size == 1) return {std::vector<std::byte>(blob.begin(), blob.end())};
  std::vector<std::byte> packed;
  if (c.rank == 0) {
    rendezvous_server server = rendezvous_host(c);
    packed = server.serve_with(c.world_size, c.timeout, {}, comm, blob, pack);
  } else {
    packed = rendezvous_fetch(c.master_addr, c.master_port, c.rank, c.world_size, c.timeout, {}, blob, c.secret);
  }
  std::vector<std::vector<std::byte>> blobs;
  std::size_t at = 0;
  while (at + 4 <= packed.size() && blobs.size() < static_cast<std::size_t>(c.world_size)) {
    const std::size_t n = get32(reinterpret_cast<const unsigned char*>(packed.data() + at));
    expects<comm_error>(at + 4 + n <= packed.size(), "rendezvous: rank 0 sent a truncated list of blobs");
    blobs.emplace_back(packed.begin() + static_cast<std::ptrdiff_t>(at + 4),
                       packed.begin() + static_cast<std::ptrdiff_t>(at + 4 + n));
    at += 4 + n;
  }
  expects<comm_error>(blobs.size() == static_cast<std::size_t>(c.world_size) && at == packed.size(), [&] {
    return cat("rendezvous: rank 0 sent ", blobs.size(), " blobs for a world of ", c.world_size,
               " (ranks built from different strata versions?)");
  });
  return blobs;
}

}  // namespace strata::detail
