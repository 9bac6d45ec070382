// The address a rank offers its peers: this machine's on its route to MASTER_ADDR, never
// the host name (Debian and Ubuntu map it to 127.0.1.1, which peers on other machines
// cannot reach; a name that does not resolve made Gloo spin without end). Gloo's TCP
// device is opened on that address, and a MASTER_ADDR without a route is a clear error.
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <strata/comm/detail/rendezvous_socket.hpp>
#include <string>
#include <vector>
#if STRATA_HAS_GLOO
#include <strata/comm/detail/gloo_exec.hpp>
#endif

#include "catch.hpp"

namespace {

// This machine's IPv4 addresses on interfaces that are up, loopback left out.
std::vector<std::string> own_ipv4_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (const ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP) || (i->ifa_flags & IFF_LOOPBACK))
      continue;
    char text[NI_MAXHOST] = {};
    if (::getnameinfo(i->ifa_addr, sizeof(sockaddr_in), text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0)
      out.emplace_back(text);
  }
  ::freeifaddrs(list);
  return out;
}

const char* const unresolvable = "strata-no-such-host.invalid";  // RFC 6761: never resolves

}  // namespace

TEST_CASE("the local address toward a host is the one on its route, numeric") {
  CHECK(strata::detail::local_address_toward("127.0.0.1") == "127.0.0.1");
  // localhost is ::1 first where /etc/hosts says so (Ubuntu 24.04), else 127.0.0.1.
  const std::string local = strata::detail::local_address_toward("localhost");
  CHECK((local == "::1" || local.rfind("127.", 0) == 0));
  // Toward one of this machine's own addresses, the route leaves from that address. (A
  // machine with loopback only has none to check: said, not failed.)
  const auto own = own_ipv4_addresses();
  if (own.empty()) WARN("no non-loopback IPv4 interface here: only loopback was checked");
  for (const auto& a : own) CHECK(strata::detail::local_address_toward(a) == a);
}

TEST_CASE("a host that does not resolve is a comm_error that names it") {
  try {
    (void)strata::detail::local_address_toward(unresolvable);
    FAIL("no error");
  } catch (const strata::comm_error& e) {
    CHECK(std::string(e.what()).find(unresolvable) != std::string::npos);
  }
}

TEST_CASE("MASTER_ADDR is waited for until it resolves, within the time-out, then named") {
  using namespace std::chrono_literals;
  namespace d = strata::detail;
  const auto start = d::rendezvous_clock::now();
  d::wait_until_resolves("127.0.0.1", d::deadline_in(10s));
  d::wait_until_resolves("localhost", d::deadline_in(10s));
  CHECK(d::rendezvous_clock::now() - start < 5s);  // at once: nothing to wait for
  const auto before = d::rendezvous_clock::now();
  try {
    d::wait_until_resolves(unresolvable, d::deadline_in(500ms));
    FAIL("no error");
  } catch (const strata::comm_error& e) {
    const std::string what = e.what();
    CHECK(what.find(unresolvable) != std::string::npos);
    CHECK(what.find("did not resolve before the time-out") != std::string::npos);
  }
  const auto waited = d::rendezvous_clock::now() - before;
  CHECK(waited >= 500ms);  // it tried again until the deadline
  CHECK(waited < 10s);
}

namespace {
// strata::detail::loopback_only over the numeric address `a` (resolved without DNS).
std::string loopback_only_of(const char* a) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* list = nullptr;
  REQUIRE(::getaddrinfo(a, nullptr, &hints, &list) == 0);
  const std::string out = strata::detail::loopback_only(list);
  ::freeaddrinfo(list);
  return out;
}
}  // namespace

TEST_CASE("loopback addresses are told from the ones other machines reach") {
  CHECK(loopback_only_of("127.0.0.1") == "127.0.0.1");
  CHECK(loopback_only_of("127.0.1.1") == "127.0.1.1");  // Debian's and Ubuntu's host name
  CHECK(loopback_only_of("::1") == "::1");
  CHECK(loopback_only_of("::ffff:127.0.1.1") == "::ffff:127.0.1.1");
  CHECK(loopback_only_of("10.1.2.3").empty());
  CHECK(loopback_only_of("::ffff:10.1.2.3").empty());
  CHECK(loopback_only_of("2001:db8::1").empty());
  CHECK(strata::detail::loopback_only(nullptr).empty());
}

TEST_CASE("a MASTER_ADDR name for loopback here is told from addresses and other names") {
  using strata::detail::loopback_master_name;
  // An address given as such, localhost (loopback on purpose) and a name that does not
  // resolve (the rendezvous fails naming it) are not such names.
  for (const char* other : {"127.0.0.1", "127.0.1.1", "::1", "localhost", unresolvable}) {
    INFO(other);
    CHECK(loopback_master_name(other).empty());
  }
  for (const auto& a : own_ipv4_addresses()) CHECK(loopback_master_name(a).empty());
  // This machine's own name, where it resolves only to loopback (this machine's
  // /etc/hosts, and Debian's and Ubuntu's 127.0.1.1), is one: its loopback address.
  char name[256] = {};
  REQUIRE(::gethostname(name, sizeof name - 1) == 0);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* list = nullptr;
  const bool resolves = ::getaddrinfo(name, nullptr, &hints, &list) == 0;
  const std::string loopback = resolves ? strata::detail::loopback_only(list) : "";
  if (list) ::freeaddrinfo(list);
  INFO(name << " resolves to loopback only: " << (loopback.empty() ? "no" : loopback));
  if (loopback.empty()) WARN("this machine's name is not loopback-only here: only the other names were checked");
  CHECK(loopback_master_name(name) == loopback);
}

TEST_CASE("the first network interface is one of this machine's, never loopback") {
  const auto net = strata::detail::first_network_interface();
  const auto own = own_ipv4_addresses();
  INFO(net.name << " " << net.address);
  if (own.empty()) {
    WARN("no non-loopback IPv4 interface here: only that none was taken for IPv4 was checked");
    CHECK(net.address.find('.') == std::string::npos);
  } else {
    CHECK(!net.name.empty());
    CHECK(std::find(own.begin(), own.end(), net.address) != own.end());
  }
}

#if STRATA_HAS_GLOO
TEST_CASE("Gloo's device is opened on the address peers can reach, not the host name's") {
  // Before, the host name was resolved: 127.0.0.1 on this machine (/etc/hosts), which a
  // rank on another machine could not connect to.
  for (const auto& a : own_ipv4_addresses()) {
    const auto device = strata::detail::gloo_device(a);
    INFO(device->str());
    CHECK(device->str().find("addr=[" + a + "]") != std::string::npos);
  }
  const auto loopback = strata::detail::gloo_device("127.0.0.1");
  CHECK(loopback->str().find("addr=[127.0.0.1]") != std::string::npos);
}

TEST_CASE("a MASTER_ADDR that does not resolve fails Gloo's device at once, saying what to set") {
  try {
    (void)strata::detail::gloo_device(unresolvable);
    FAIL("no error");
  } catch (const strata::comm_error& e) {
    const std::string what = e.what();
    CHECK(what.find(unresolvable) != std::string::npos);
    CHECK(what.find("STRATA_GLOO_IFNAME") != std::string::npos);
  }
}
#endif
