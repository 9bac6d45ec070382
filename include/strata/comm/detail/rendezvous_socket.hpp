// The POSIX TCP pieces of the NCCL bootstrap's rendezvous: an owning socket, address
// resolution, whole-message send/receive bounded by a deadline, and the local address
// that peers can reach.
#pragma once
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "time_out.hpp"

namespace strata::detail {

using rendezvous_clock = std::chrono::steady_clock;

class socket_fd {
 public:
  socket_fd() = default;
  explicit socket_fd(int fd) noexcept : fd_(fd) {}
  socket_fd(const socket_fd&) = delete;
  socket_fd& operator=(const socket_fd&) = delete;
  socket_fd(socket_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  socket_fd& operator=(socket_fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  ~socket_fd() { reset(); }
  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Milliseconds left until `deadline` (at least 0), for poll().
inline int ms_left(rendezvous_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - rendezvous_clock::now()).count();
  return left <= 0 ? 0 : left > 1'000'000'000 ? 1'000'000'000 : static_cast<int>(left);
}

// Waits until one of `fds` has an event it asks for; false at the deadline.
inline bool poll_until(pollfd* fds, std::size_t n, rendezvous_clock::time_point deadline) {
  for (;;) {
    const int r = ::poll(fds, static_cast<nfds_t>(n), ms_left(deadline));
    if (r > 0) return true;
    // ms_left caps one wait at 1e9 ms: a later deadline waits again.
    if (r == 0 && rendezvous_clock::now() >= deadline) return false;
    if (r == 0) continue;
    if (errno != EINTR) throw comm_error(cat("rendezvous: poll failed: ", errno_text(errno)));
  }
}

// Waits until fd is ready for `events`; false at the deadline.
inline bool wait_ready(int fd, short events, rendezvous_clock::time_point deadline) {
  pollfd p{fd, events, 0};
  return poll_until(&p, 1, deadline);
}

// The index of a listening socket of `fds` with a connection to accept (the first at or
// after `start`, cyclically); -1 at the deadline.
inline int wait_any_readable(const std::vector<socket_fd>& fds, rendezvous_clock::time_point deadline,
                             std::size_t start = 0) {
  std::vector<pollfd> p;
  for (const auto& f : fds) p.push_back({f.get(), POLLIN, 0});
  if (!poll_until(p.data(), p.size(), deadline)) return -1;
  for (std::size_t k = 0; k < p.size(); ++k)
    if (const std::size_t i = (start + k) % p.size(); p[i].revents) return static_cast<int>(i);
  return -1;
}

// Writes all of [data, data + n) before the deadline. `what` names the exchange in errors.
inline void send_all(int fd, const void* data, std::size_t n, rendezvous_clock::time_point deadline,
                     const std::string& what) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    if (!wait_ready(fd, POLLOUT, deadline)) throw comm_error(cat(what, ": timed out while sending"));
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw comm_error(cat(what, ": send failed: ", errno_text(errno)));
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Reads exactly n bytes before the deadline; a peer that closes early is an error.
inline void recv_all(int fd, void* data, std::size_t n, rendezvous_clock::time_point deadline,
                     const std::string& what) {
  auto* p = static_cast<unsigned char*>(data);
  while (n > 0) {
    if (!wait_ready(fd, POLLIN, deadline)) throw comm_error(cat(what, ": timed out while receiving"));
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0) throw comm_error(cat(what, ": the peer closed the connection"));
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      throw comm_error(cat(what, ": receive failed: ", errno_text(errno)));
    }
    p += r;
    n -= static_cast<std::size_t>(r);
  }
}

// Returns once `host` resolves; a comm_error naming it where it has not by `deadline`.
// A Kubernetes pod may start before its peers' DNS records (or its own) are published:
// rank 0's bind and the Gloo device resolve MASTER_ADDR before any connection, so they
// wait for it as the other ranks' connection attempts do, within the same time-out.
inline void wait_until_resolves(const std::string& host, rendezvous_clock::time_point deadline) {
  auto pause = std::chrono::milliseconds(50);
  for (;;) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int r = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (found) ::freeaddrinfo(found);
    if (r == 0) return;
    const auto now = rendezvous_clock::now();
    if (now >= deadline)
      throw comm_error(cat("rendezvous: MASTER_ADDR \"", host, "\" did not resolve before the time-out (",
                           ::gai_strerror(r), "); check the name, or raise STRATA_COMM_TIMEOUT"));
    std::this_thread::sleep_for(std::min<rendezvous_clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

// Whether the peer of a held connection has gone (closed, or reset): a rank sends nothing
// after its hello while it waits for rank 0's reply, so anything to read is its end.
inline bool closed_by_peer(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP)) return true;
  char c = 0;
  const ssize_t r = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

inline void set_nonblocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw comm_error(cat("rendezvous: fcntl(O_NONBLOCK) failed: ", errno_text(errno)));
}

// getaddrinfo for a TCP endpoint; host may be empty for "any local address" (passive).
struct addr_list {
  addrinfo* head = nullptr;
  addr_list(const std::string& host, int port, bool passive) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = passive ? AI_PASSIVE : 0;
    const std::string service = std::to_string(port);
    const int r = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &head);
    if (r != 0) throw comm_error(cat("rendezvous: cannot resolve \"", host, "\" (MASTER_ADDR): ", ::gai_strerror(r)));
  }
  addr_list(const addr_list&) = delete;
  addr_list& operator=(const addr_list&) = delete;
  ~addr_list() {
    if (head) ::freeaddrinfo(head);
  }
};

// This machine's address (numeric) on its route to `host`: the one a peer that reaches
// `host` the same way can connect back to, unlike the host name, which Debian and Ubuntu
// map to 127.0.1.1. A UDP socket's connect() only picks the route and the source address;
// nothing is sent. A host that does not resolve, or has no route, is a comm_error.
inline std::string local_address_toward(const std::string& host) {
  const addr_list to(host, 9, false);
  int last_errno = 0;
  for (const addrinfo* a = to.head; a; a = a->ai_next) {
    const socket_fd fd(::socket(a->ai_family, SOCK_DGRAM, 0));
    if (!fd || ::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage self{};
    socklen_t len = sizeof self;
    char text[NI_MAXHOST] = {};
    if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&self), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<const sockaddr*>(&self), len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) ==
            0)
      return text;
    last_errno = errno;
  }
  throw comm_error(cat("no local address has a route to \"", host, "\" (MASTER_ADDR): ", errno_text(last_errno)));
}

// Whether `a` is a loopback address: 127/8, ::1, or 127/8 mapped into IPv6.
inline bool is_loopback_address(const sockaddr* a) {
  if (a->sa_family == AF_INET) return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  if (a->sa_family != AF_INET6) return false;
  const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

// The first address of `list` in numeric form where every one is loopback; empty where
// any is not (or the list is empty).
inline std::string loopback_only(const addrinfo* list) {
  std::string first;
  for (const addrinfo* a = list; a; a = a->ai_next) {
    if (!is_loopback_address(a->ai_addr)) return {};
    char text[NI_MAXHOST] = {};
    if (first.empty() && ::getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      first = text;
  }
  return first;
}

// The loopback address MASTER_ADDR is here where it is a *name* that resolves only to
// loopback on this machine: Debian and Ubuntu map the host name to 127.0.1.1, and
// torchrun's c10d rendezvous gives rank 0's host name. Empty for an address given as such,
// for "localhost" (loopback on purpose), and for a name that resolves elsewhere or not at
// all (the rendezvous then fails naming it).
inline std::string loopback_master_name(const std::string& master_addr) {
  in6_addr scratch{};
  if (::inet_pton(AF_INET, master_addr.c_str(), &scratch) == 1 ||
      ::inet_pton(AF_INET6, master_addr.c_str(), &scratch) == 1 || master_addr == "localhost")
    return {};
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  if (::getaddrinfo(master_addr.c_str(), nullptr, &hints, &list) != 0) return {};
  std::string loopback = loopback_only(list);
  ::freeaddrinfo(list);
  return loopback;
}

// The interface STRATA_GLOO_IFNAME (or else GLOO_SOCKET_IFNAME, PyTorch's) names for Gloo's
// device, or null.
inline const char* gloo_ifname_from_env() {
  for (const char* name : {"STRATA_GLOO_IFNAME", "GLOO_SOCKET_IFNAME"})
    if (const char* v = std::getenv(name); v && *v) return v;
  return nullptr;
}

// This machine's first network interface that is up and neither loopback nor a docker
// bridge (NCCL's default choice), IPv4 before IPv6: its name and numeric address, or
// empty where there is none.
struct network_interface {
  std::string name, address;
};
inline network_interface first_network_interface() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  network_interface v4, v6;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK) ||
        std::string_view(i->ifa_name).starts_with("docker") || is_loopback_address(i->ifa_addr))
      continue;
    const int family = i->ifa_addr->sa_family;
    network_interface& slot = family == AF_INET ? v4 : v6;
    if ((family != AF_INET && family != AF_INET6) || !slot.name.empty()) continue;
    // An IPv6 link-local address needs its scope to be reached: left out.
    if (family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr))
      continue;
    char text[NI_MAXHOST] = {};
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (::getnameinfo(i->ifa_addr, len, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0) slot = {i->ifa_name, text};
  }
  ::freeifaddrs(list);
  return v4.name.empty() ? v6 : v4;
}

}  // namespace strata::detail
