// A TCP rendezvous in the torchrun convention (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE,
// LOCAL_RANK): rank 0 listens, takes a blob from every rank, and once every rank has come
// (and no two name the same device) hands each the same bytes: its own (the ncclUniqueId)
// or every rank's blobs (the addresses a host communicator without MPI connects by).
#pragma once
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "lane.hpp"
#include "rendezvous_socket.hpp"

namespace strata::detail {

struct rendezvous_config {
  std::string master_addr;
  int master_port = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::chrono::duration<double> timeout{300.0};

  // Reads the launcher's variables (LOCAL_RANK defaults to 0); the time-out is
  // STRATA_COMM_TIMEOUT's. A missing or malformed variable is a config_error naming it.
  static rendezvous_config from_env() {
    rendezvous_config c;
    const char* addr = std::getenv("MASTER_ADDR");
    expects<config_error>(addr && *addr,
                          "NCCL bootstrap without MPI: MASTER_ADDR is not set; set it to rank 0's host name or "
                          "address (torchrun, Slurm and Kubernetes launchers set MASTER_ADDR, MASTER_PORT, RANK, "
                          "WORLD_SIZE and LOCAL_RANK)");
    c.master_addr = addr;
    c.master_port = env_number("MASTER_PORT", true, 1, 65535);
    c.world_size = env_number("WORLD_SIZE", true, 1, 1 << 24);
    c.rank = env_number("RANK", true, 0, c.world_size - 1);
    c.local_rank = env_number("LOCAL_RANK", false, 0, 1 << 24);
    c.timeout = default_comm_timeout();
    return c;
  }

 private:
  static int env_number(const char* name, bool required, long lo, long hi) {
    const char* s = std::getenv(name);
    if (!s || !*s) {
      expects<config_error>(!required, [&] { return cat("NCCL bootstrap without MPI: ", name, " is not set"); });
      return 0;
    }
    char* end = nullptr;
    const long v = std::strtol(s, &end, 10);
    expects<config_error>(*end == '\0' && v >= lo && v <= hi, [&] {
      return cat("NCCL bootstrap without MPI: ", name, "=\"", s, "\" is not an integer in [", lo, ", ", hi, "]");
    });
    return static_cast<int>(v);
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
inline constexpr std::uint32_t version = 3;          // 2: a device_key; 3: a blob after the hello
// A rejection for a duplicate device is a config_error on every rank; others are comm_errors.
inline constexpr std::uint32_t ok = 0, rejected = 1, rejected_config = 2;
inline constexpr std::size_t node_bytes = 64, device_bytes = 32, hello_bytes = 16 + node_bytes + device_bytes;
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
// other ranks may start connecting before serve() is called.
class rendezvous_server {
 public:
  // host empty: every local address (IPv6 and IPv4 where the system allows both).
  explicit rendezvous_server(int port, const std::string& host = "") {
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
      return cat("rendezvous: rank 0 cannot listen on port ", port, ": ", last,
                 " (is another job using MASTER_PORT? pick a free port)");
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

  // Waits for ranks 1 .. world_size - 1, each holding its connection, then checks that
  // no two ranks (rank 0 with `own` among them) name the same device and sends each the
  // payload. A rank that did not come within the time-out, disagreed on the world size
  // or came twice is a comm_error here, and every rank that came is told the same;
  // a shared device is a config_error on every rank.
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
    const auto deadline = rendezvous_clock::now() + std::chrono::duration_cast<rendezvous_clock::duration>(timeout);
    raise_open_file_limit(static_cast<rlim_t>(world_size) + 64);  // one held connection per rank
    std::vector<socket_fd> held(static_cast<std::size_t>(world_size));
    std::vector<device_key> keys(static_cast<std::size_t>(world_size));
    keys[0] = own;
    std::vector<std::vector<std::byte>> blobs(static_cast<std::size_t>(world_size));
    blobs[0].assign(own_blob.begin(), own_blob.end());
    // Tells every rank that came (and `extra`, a connection not held) the problem, then
    // throws it: a config_error as it is, a comm_error after `prefix`.
    const auto reject_all = [&](std::uint32_t status, const std::string& problem, const char* prefix, int extra = -1) {
      for (auto& c : held)
        if (c) try_reply(c.get(), status, problem, deadline);
      if (extra >= 0) try_reply(extra, status, problem, deadline);
      if (status == rejected_config) throw config_error(problem);
      throw comm_error(cat(prefix, problem));
    };
    int missing = world_size - 1;
    while (missing > 0) {
      if (!wait_ready(fd_.get(), POLLIN, deadline)) {
        std::string ranks;
        for (int r = 1; r < world_size; ++r)
          if (!held[static_cast<std::size_t>(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
        reject_all(rejected,
                   cat("rank 0 (port ", port(), ") waited ", timeout.count(), " s; rank(s) ", ranks, " of ", world_size,
                       " did not connect. Check that every rank was started with the same MASTER_ADDR, MASTER_PORT "
                       "and WORLD_SIZE (STRATA_COMM_TIMEOUT sets the time-out)"),
                   "rendezvous: ");
      }
      socket_fd c(::accept(fd_.get(), nullptr, nullptr));
      if (!c && (errno == EMFILE || errno == ENFILE))
        reject_all(rejected,
                   cat("rank 0 cannot hold the connections of ", world_size - 1, " ranks: ", errno_text(errno),
                       " (raise the open-file limit: ulimit -n)"),
                   "rendezvous: ");
      if (!c) continue;  // the client gave up between poll and accept, or EINTR
      set_nonblocking(c.get());
      unsigned char hello[hello_bytes + 4];
      std::vector<std::byte> blob;
      try {
        recv_all(c.get(), hello, 16, deadline, "rendezvous: rank 0 reading a hello");
        if (get32(hello) != magic || get32(hello + 4) != version) continue;  // not one of ours (a port probe)
        recv_all(c.get(), hello + 16, hello_bytes + 4 - 16, deadline, "rendezvous: rank 0 reading a hello");
        const std::uint32_t n = get32(hello + hello_bytes);
        if (n > max_blob_bytes) continue;
        blob.resize(n);
        if (n) recv_all(c.get(), blob.data(), n, deadline, "rendezvous: rank 0 reading a hello");
      } catch (const comm_error&) {
        continue;  // the deadline still bounds the wait
      }
      const int rank = static_cast<int>(get32(hello + 8));
      const int world = static_cast<int>(get32(hello + 12));
      std::string problem;
      if (world != world_size)
        problem = cat("rank ", rank, " says WORLD_SIZE=", world, ", rank 0 has WORLD_SIZE=", world_size);
      else if (rank <= 0 || rank >= world_size)
        problem = cat("rank ", rank, " is not a rank in 1..", world_size - 1);
      else if (held[static_cast<std::size_t>(rank)])
        problem = cat("rank ", rank, " connected twice (two processes with the same RANK?)");
      if (!problem.empty()) reject_all(rejected, problem, "rendezvous: rank 0 rejected a rank: ", c.get());
      keys[static_cast<std::size_t>(rank)] = get_key(hello + 16);
      blobs[static_cast<std::size_t>(rank)] = std::move(blob);
      held[static_cast<std::size_t>(rank)] = std::move(c);
      --missing;
    }
    if (const auto shared = find_shared_device(keys))
      reject_all(
          rejected_config,
          duplicate_gpu_message(comm, shared->first, shared->second, keys[static_cast<std::size_t>(shared->first)]),
          "");
    std::vector<std::byte> payload = payload_of(std::as_const(blobs));
    for (auto& c : held)
      if (c) reply(c.get(), ok, {}, payload, deadline);
    return payload;
  }

 private:
  static void reply(int fd, std::uint32_t status, const std::string& message, std::span<const std::byte> payload,
                    rendezvous_clock::time_point deadline) {
    using namespace rendezvous_wire;
    std::vector<unsigned char> out(12 + message.size() + payload.size());
    put32(out.data(), status);
    put32(out.data() + 4, static_cast<std::uint32_t>(message.size()));
    put32(out.data() + 8, static_cast<std::uint32_t>(payload.size()));
    std::copy(message.begin(), message.end(), out.begin() + 12);
    if (!payload.empty()) std::memcpy(out.data() + 12 + message.size(), payload.data(), payload.size());
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

  // A rejection to a rank that may have given up already: its own time-out tells it.
  static void try_reply(int fd, std::uint32_t status, const std::string& message,
                        rendezvous_clock::time_point deadline) {
    try {
      reply(fd, status, message, {}, deadline);
    } catch (const comm_error&) {
    }
  }

  socket_fd fd_;
};

// Connects to rank 0 at host:port (retrying until the time-out, since rank 0 may start
// later), introduces itself as `rank` of `world_size` using device `key`, and returns rank
// 0's payload once every rank has come.
inline std::vector<std::byte> rendezvous_fetch(const std::string& host, int port, int rank, int world_size,
                                               std::chrono::duration<double> timeout, const device_key& key = {},
                                               std::span<const std::byte> blob = {}) {
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
  std::vector<unsigned char> hello(hello_bytes + 4 + blob.size());
  put32(hello.data(), magic);
  put32(hello.data() + 4, version);
  put32(hello.data() + 8, static_cast<std::uint32_t>(rank));
  put32(hello.data() + 12, static_cast<std::uint32_t>(world_size));
  put_key(hello.data() + 16, key);
  put32(hello.data() + hello_bytes, static_cast<std::uint32_t>(blob.size()));
  if (!blob.empty()) std::memcpy(hello.data() + hello_bytes + 4, blob.data(), blob.size());
  send_all(s.get(), hello.data(), hello.size(), deadline, where);
  unsigned char head[12];
  recv_all(s.get(), head, sizeof head, deadline, where);
  std::string message(get32(head + 4), '\0');
  std::vector<std::byte> payload(get32(head + 8));
  if (!message.empty()) recv_all(s.get(), message.data(), message.size(), deadline, where);
  if (!payload.empty()) recv_all(s.get(), payload.data(), payload.size(), deadline, where);
  expects<config_error>(get32(head) != rejected_config, [&] { return message; });
  expects<comm_error>(get32(head) == ok, [&] { return cat(where, ": rank 0 rejected this rank: ", message); });
  return payload;
}

// Every rank calls this: rank 0 serves `payload` (others pass an empty span) and
// returns it; every other rank returns the bytes rank 0 served. `key` is the device this
// rank will use (two ranks with one key are a config_error on every rank).
inline std::vector<std::byte> rendezvous_broadcast(const rendezvous_config& c, std::span<const std::byte> payload,
                                                   const device_key& key = {}, const std::string& comm = "nccl") {
  if (c.rank == 0) {
    rendezvous_server server(c.master_port);
    server.serve(payload, c.world_size, c.timeout, key, comm);
    return {payload.begin(), payload.end()};
  }
  return rendezvous_fetch(c.master_addr, c.master_port, c.rank, c.world_size, c.timeout, key);
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
  std::vector<std::byte> packed;
  if (c.rank == 0) {
    rendezvous_server server(c.master_port);
    packed = server.serve_with(c.world_size, c.timeout, {}, comm, blob, pack);
  } else {
    packed = rendezvous_fetch(c.master_addr, c.master_port, c.rank, c.world_size, c.timeout, {}, blob);
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
