// The address a rank offers its peers: this machine's on its route to MASTER_ADDR, never
// the host name (Debian and Ubuntu map it to 127.0.1.1, which peers on other machines
// cannot reach; a name that does not resolve made Gloo spin without end). Gloo's TCP
// device is opened on that address, and a MASTER_ADDR without a route is a clear error.
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <sys/socket.h>

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
