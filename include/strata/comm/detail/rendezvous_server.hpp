// Rank 0's side of the TCP rendezvous (rendezvous.hpp): the wire format both sides speak,
// the device keys no two ranks may share, and the server that holds every rank's
// connection until all have come, then answers each.
#pragma once
#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "rendezvous_auth.hpp"
#include "rendezvous_socket.hpp"

namespace strata::detail {

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
// 2: a device_key; 3: a blob after the hello; 4: nonces, a challenge and proofs of the secret;
// 5: a 64-bit payload length, each rank its own answer (an all-to-all)
inline constexpr std::uint32_t version = 5;
// A rejection for a duplicate device or a wrong secret is a config_error; others are comm_errors.
inline constexpr std::uint32_t ok = 0, rejected = 1, rejected_config = 2, rejected_secret = 3;
inline constexpr std::uint32_t needs_secret = 1;  // the challenge's flag
inline constexpr std::size_t node_bytes = 64, device_bytes = 32, key_bytes = node_bytes + device_bytes;
// The client's preface (magic, version, rank, world size, its nonce), the server's
// challenge (magic, flags, its nonce), the client's body (device key, blob length,
// proof; the blob follows) and the server's reply head (status, lengths, proof).
inline constexpr std::size_t preface_bytes = 16 + nonce_bytes, challenge_bytes = 8 + nonce_bytes,
                             body_bytes = key_bytes + 4 + proof_bytes, reply_bytes = 16 + proof_bytes;
// A rank's blob is at most this (a host communicator's addresses: 196 bytes a peer).
inline constexpr std::size_t max_blob_bytes = std::size_t{64} << 20;
// A reply's message (a rejection's text) is at most this.
inline constexpr std::size_t max_message_bytes = std::size_t{64} << 10;

inline void put32(unsigned char* p, std::uint32_t v) {
  for (int i = 3; i >= 0; --i, v >>= 8) p[i] = static_cast<unsigned char>(v & 0xffu);
}
inline std::uint32_t get32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}
inline void put64(unsigned char* p, std::uint64_t v) {
  put32(p, static_cast<std::uint32_t>(v >> 32));
  put32(p + 4, static_cast<std::uint32_t>(v));
}
inline std::uint64_t get64(const unsigned char* p) { return (std::uint64_t{get32(p)} << 32) | get32(p + 4); }
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
      : rendezvous_server(port, host.empty() ? std::vector<std::string>{} : std::vector<std::string>{host},
                          std::move(secret)) {}

  // Listens on every address that each of `hosts` resolves to (a name with an A and an AAAA
  // record, or with a loopback and a network address): a peer may reach rank 0 by any of
  // them, and one that can reach only the second must not wait out the time-out. One port
  // for all of them. None: every local address.
  rendezvous_server(int port, const std::vector<std::string>& hosts, std::string secret = "")
      : secret_(std::move(secret)) {
    for (const auto& h : hosts) host_ += (host_.empty() ? "" : ",") + h;
    std::string last = "no address to bind";
    if (hosts.empty()) {
      addr_list addrs("", port, true);
      // Prefer an IPv6 socket that also takes IPv4 clients; fall back to whatever binds.
      std::vector<addrinfo*> order;
      for (addrinfo* a = addrs.head; a; a = a->ai_next) order.push_back(a);
      std::stable_sort(order.begin(), order.end(), [](const addrinfo* a, const addrinfo* b) {
        return a->ai_family == AF_INET6 && b->ai_family != AF_INET6;
      });
      for (std::size_t i = 0; i < order.size() && fds_.empty(); ++i) (void)listen_on(order[i], port, last);
    }
    std::vector<std::string> skipped;  // addresses that did not bind while another did
    std::vector<sockaddr_storage> tried;
    for (const auto& h : hosts) {
      addr_list addrs(h, port, true);
      for (addrinfo* a = addrs.head; a; a = a->ai_next) {
        sockaddr_storage at{};
        std::memcpy(&at, a->ai_addr, a->ai_addrlen);
        // A name listed twice (a container's /etc/hosts often is) is one address.
        if (std::any_of(tried.begin(), tried.end(), [&](const sockaddr_storage& t) { return same_host(t, at); }))
          continue;
        tried.push_back(at);
        const int p = fds_.empty() ? port : this->port();
        // Loopback is for ranks on this machine, which reach the other loopback address
        // where one family is off (::1 in a container without IPv6): not worth a word.
        if (!listen_on(a, p, last) && !is_loopback_address(a->ai_addr))
          skipped.push_back(cat(address_text(at, false), " port ", p, " (", last, ")"));
      }
    }
    // A rank that reaches rank 0 only by a skipped address would wait out its time-out:
    // say which, where the job can still start.
    if (!fds_.empty())
      for (const auto& a : skipped) {
        std::fprintf(stderr,
                     "strata: rendezvous: rank 0 cannot listen on %s too; ranks that reach it only there "
                     "will not be served\n",
                     a.c_str());
        std::fflush(stderr);
      }
    expects<comm_error>(!fds_.empty(), [&] {
      return cat("rendezvous: rank 0 cannot listen on ", host_.empty() ? std::string("port ") : host_ + " port ", port,
                 ": ", last,
                 " (is another job using MASTER_PORT? pick a free port; STRATA_RENDEZVOUS_BIND=any listens on every "
                 "address)");
    });
  }

  int port() const {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fds_.front().get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
      throw comm_error(cat("rendezvous: getsockname failed: ", errno_text(errno)));
    if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&a)->sin6_port);
    return ntohs(reinterpret_cast<const sockaddr_in*>(&a)->sin_port);
  }
  // How long one connection may take over its hello before it is dropped.
  void set_hello_limit(std::chrono::duration<double> t) { hello_limit_ = t; }
  // Where it listens, for the launch line: "host:port" ("h1,h2:port" for several hosts), or
  // "*:port" for every address.
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
    std::optional<std::vector<std::byte>> all;  // one payload, made once
    return serve_each(world_size, timeout, own, comm, own_blob,
                      [&](const std::vector<std::vector<std::byte>>& blobs, int) -> const std::vector<std::byte>& {
                        if (!all) all = payload_of(blobs);
                        return *all;
                      });
  }

  // The same, but rank r is sent `payload_for(blobs, r)` (each rank its own part of every
  // blob, say); returns rank 0's.
  template <class Payload>
  std::vector<std::byte> serve_each(int world_size, std::chrono::duration<double> timeout, const device_key& own,
                                    const std::string& comm, std::span<const std::byte> own_blob,
                                    Payload&& payload_for) {
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
      const int ready = wait_any_readable(fds_, deadline, next_listener_++);
      if (ready < 0) {
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
      socket_fd c(::accept(fds_[static_cast<std::size_t>(ready)].get(), reinterpret_cast<sockaddr*>(&from), &from_len));
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
    for (std::size_t r = 1; r < held.size(); ++r) {
      const auto& payload = payload_for(std::as_const(blobs), static_cast<int>(r));
      reply(held[r].fd.get(), ok, {}, payload, deadline,
            prove(secret_, std::string_view("strata rendezvous server"), held[r].client_nonce, held[r].server_nonce,
                  payload));
    }
    return std::vector<std::byte>(payload_for(std::as_const(blobs), 0));
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

  // Whether two socket addresses name the same host address (ports aside).
  static bool same_host(const sockaddr_storage& a, const sockaddr_storage& b) {
    if (a.ss_family != b.ss_family) return false;
    if (a.ss_family == AF_INET6)
      return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(&a)->sin6_addr,
                         &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
    return a.ss_family == AF_INET && reinterpret_cast<const sockaddr_in*>(&a)->sin_addr.s_addr ==
                                         reinterpret_cast<const sockaddr_in*>(&b)->sin_addr.s_addr;
  }

  static std::string address_text(const sockaddr_storage& a, bool with_port = true) {
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
    return with_port ? cat(text, ":", port) : std::string(text);
  }

  static void reply(int fd, std::uint32_t status, const std::string& message, std::span<const std::byte> payload,
                    rendezvous_clock::time_point deadline, const rendezvous_proof& proof = {}) {
    using namespace rendezvous_wire;
    const std::string_view text = std::string_view(message).substr(0, max_message_bytes);  // what a rank reads
    std::vector<unsigned char> out(reply_bytes + text.size() + payload.size());
    put32(out.data(), status);
    put32(out.data() + 4, static_cast<std::uint32_t>(text.size()));
    put64(out.data() + 8, payload.size());
    std::copy(proof.begin(), proof.end(), out.begin() + 16);
    std::copy(text.begin(), text.end(), out.begin() + reply_bytes);
    if (!payload.empty()) std::memcpy(out.data() + reply_bytes + text.size(), payload.data(), payload.size());
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

  // Adds a listening socket on `a` at `port` where it binds; else false, and `last` says why.
  bool listen_on(const addrinfo* a, int port, std::string& last) {
    socket_fd s(::socket(a->ai_family, a->ai_socktype, a->ai_protocol));
    if (!s) {
      last = errno_text(errno);
      return false;
    }
    sockaddr_storage at{};
    std::memcpy(&at, a->ai_addr, a->ai_addrlen);
    const auto p = htons(static_cast<std::uint16_t>(port));
    if (a->ai_family == AF_INET6)
      reinterpret_cast<sockaddr_in6*>(&at)->sin6_port = p;
    else
      reinterpret_cast<sockaddr_in*>(&at)->sin_port = p;
    const int one = 1, zero = 0;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (a->ai_family == AF_INET6) ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&at), a->ai_addrlen) != 0 || ::listen(s.get(), 128) != 0) {
      last = errno_text(errno);
      return false;
    }
    set_nonblocking(s.get());
    fds_.push_back(std::move(s));
    return true;
  }

  std::vector<socket_fd> fds_;     // listening, one port
  std::size_t next_listener_ = 0;  // where the next wait starts looking: no socket starves another
  std::string host_;
  std::string secret_;
  std::chrono::duration<double> hello_limit_{10.0};
};

}  // namespace strata::detail
