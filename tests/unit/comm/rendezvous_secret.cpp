// The rendezvous admits only its own job: with a job secret, a connection proves it
// (HMAC-SHA256 over both sides' nonces, never the secret itself) before it is given a
// rank; strangers (a wrong secret, none, another protocol, a hello that stalls) are
// refused while the job's ranks come in; rank 0 listens where MASTER_ADDR says.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/detail/rendezvous.hpp>

#include "catch.hpp"

using namespace std::chrono_literals;
using strata::detail::rendezvous_config;
using strata::detail::rendezvous_fetch;
using strata::detail::rendezvous_server;

namespace {

template <class E = strata::comm_error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(none)";
}

// A raw TCP connection to 127.0.0.1:port that sends `bytes` and then holds the line
// until the server closes it (or `hold` passes); true when the server closed it.
bool send_raw(int port, const std::string& bytes, std::chrono::milliseconds hold) {
  strata::detail::addr_list a("127.0.0.1", port, false);
  strata::detail::socket_fd s(::socket(a.head->ai_family, a.head->ai_socktype, a.head->ai_protocol));
  if (::connect(s.get(), a.head->ai_addr, a.head->ai_addrlen) != 0) return false;
  if (!bytes.empty() && ::send(s.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) return false;
  strata::detail::set_nonblocking(s.get());
  const auto deadline = std::chrono::steady_clock::now() + hold;
  char sink[256];
  while (strata::detail::wait_ready(s.get(), POLLIN, deadline))
    if (::recv(s.get(), sink, sizeof sink, 0) <= 0) return true;
  return false;
}

std::string preface_start() {  // the magic and version of a hello, and nothing more
  unsigned char b[8];
  strata::detail::rendezvous_wire::put32(b, strata::detail::rendezvous_wire::magic);
  strata::detail::rendezvous_wire::put32(b + 4, strata::detail::rendezvous_wire::version);
  return std::string(reinterpret_cast<const char*>(b), sizeof b);
}

}  // namespace

TEST_CASE("a job of 4 ranks completes while strangers try to join", "[rendezvous][secret]") {
  const std::string secret = "correct horse battery staple";
  rendezvous_server server(0, "127.0.0.1", secret);
  server.set_hello_limit(1s);
  const int port = server.port(), world = 4;
  const std::vector<std::byte> payload(16, std::byte{7});
  std::string wrong, none;
  bool garbage_closed = false, stall_dropped = false;
  const auto start = std::chrono::steady_clock::now();
  std::string served = "(not yet)";
  std::thread rank0([&] { served = error_of([&] { server.serve(payload, world, 20s); }); });
  std::vector<std::thread> strangers;
  // Each claims a real rank before the real one comes, so a stranger admitted would take its place.
  strangers.emplace_back([&] { stall_dropped = send_raw(port, preface_start(), 20s); });  // a hello that stalls
  strangers.emplace_back([&] {
    std::this_thread::sleep_for(100ms);
    wrong =
        error_of<strata::config_error>([&] { rendezvous_fetch("127.0.0.1", port, 1, world, 20s, {}, {}, "guess"); });
  });
  strangers.emplace_back([&] {
    std::this_thread::sleep_for(200ms);
    none = error_of<strata::config_error>([&] { rendezvous_fetch("127.0.0.1", port, 2, world, 20s); });
  });
  strangers.emplace_back([&] {
    std::this_thread::sleep_for(300ms);
    garbage_closed = send_raw(port, std::string(64, '\x5a'), 20s);  // another protocol
  });
  for (auto& t : strangers) t.join();
  std::vector<std::vector<std::byte>> got(world);
  std::vector<std::thread> ranks;
  for (int r = 1; r < world; ++r)
    ranks.emplace_back([&, r] { got[r] = rendezvous_fetch("127.0.0.1", port, r, world, 20s, {}, {}, secret); });
  for (auto& t : ranks) t.join();
  rank0.join();
  CHECK(served == "(none)");
  CHECK(std::chrono::steady_clock::now() - start < 10s);
  for (int r = 1; r < world; ++r) CHECK(got[r] == payload);
  CHECK(stall_dropped);
  CHECK(garbage_closed);
  INFO(wrong);
  CHECK(wrong.find("refused this rank's proof of the job secret: set the same STRATA_JOB_SECRET") != std::string::npos);
  INFO(none);
  CHECK(none.find("rank 0 admits only ranks that hold the job's secret: set STRATA_JOB_SECRET") != std::string::npos);
}

TEST_CASE("a rank with a secret that rank 0 lacks fails, naming STRATA_JOB_SECRET", "[rendezvous][secret]") {
  rendezvous_server server(0, "127.0.0.1");
  std::string msg, rank0;
  std::thread rank1([&] {
    msg = error_of<strata::config_error>([&] { rendezvous_fetch("127.0.0.1", server.port(), 1, 2, 20s, {}, {}, "s"); });
  });
  rank0 = error_of([&] { server.serve({}, 2, 2s); });  // rank 1 never comes in
  rank1.join();
  CHECK(rank0.find("rank(s) 1 of 2 did not connect") != std::string::npos);
  CHECK(msg.find("this rank has a job secret (STRATA_JOB_SECRET) and rank 0 has none") != std::string::npos);
}

TEST_CASE("rank 0 listens on MASTER_ADDR's address only, unless told every address", "[rendezvous][bind]") {
  rendezvous_config c;
  c.master_addr = "127.0.0.1";
  c.master_port = 0;
  {
    auto server = strata::detail::rendezvous_host(c);
    CHECK(server.where() == "127.0.0.1:" + std::to_string(server.port()));
    // 127.0.0.2 is this machine too (all of 127/8 is loopback), but not the bound address.
    const std::string msg = error_of([&] { rendezvous_fetch("127.0.0.2", server.port(), 1, 2, 500ms); });
    CHECK(msg.find("could not connect") != std::string::npos);
  }
  c.bind_any = true;
  auto server = strata::detail::rendezvous_host(c);
  CHECK(server.where().rfind("*:", 0) == 0);
  std::vector<std::byte> got;
  std::thread rank1([&] { got = rendezvous_fetch("127.0.0.2", server.port(), 1, 2, 20s); });
  server.serve(std::vector<std::byte>(4, std::byte{1}), 2, 20s);
  rank1.join();
  CHECK(got.size() == 4);
}

TEST_CASE("the secret comes from STRATA_JOB_SECRET or a file, one of them", "[rendezvous][secret]") {
  using strata::detail::job_secret_from_env;
  ::unsetenv("STRATA_JOB_SECRET");
  ::unsetenv("STRATA_JOB_SECRET_FILE");
  CHECK(job_secret_from_env().empty());
  ::setenv("STRATA_JOB_SECRET", "abc", 1);
  CHECK(job_secret_from_env() == "abc");
  const std::string path = "rendezvous_secret_test.txt";
  std::ofstream(path) << "from a file\n";
  ::setenv("STRATA_JOB_SECRET_FILE", path.c_str(), 1);
  CHECK(error_of<strata::config_error>(job_secret_from_env).find("both set") != std::string::npos);
  ::unsetenv("STRATA_JOB_SECRET");
  CHECK(job_secret_from_env() == "from a file");
  std::ofstream(path) << "";
  CHECK(error_of<strata::config_error>(job_secret_from_env).find("the file is empty") != std::string::npos);
  ::setenv("STRATA_JOB_SECRET_FILE", "/nonexistent/secret", 1);
  CHECK(error_of<strata::config_error>(job_secret_from_env).find("cannot read") != std::string::npos);
  ::unsetenv("STRATA_JOB_SECRET_FILE");
  std::remove(path.c_str());
}
