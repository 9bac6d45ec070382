// The TCP rendezvous behind the NCCL bootstrap and the Gloo world without MPI, run between
// threads on 127.0.0.1: every rank gets rank 0's bytes once all have come; a missing rank
// is a comm_error on every rank that came, saying which, within the time-out; a
// misconfigured or stray connection is refused and told why while the job goes on; two
// ranks naming one GPU are a config_error on every rank. With a job secret, only ranks
// that prove it are admitted (tests/unit/comm/rendezvous_secret.cpp).
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <random>
#include <strata/comm/detail/rendezvous.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch.hpp"

using namespace std::chrono_literals;
using strata::detail::device_key;
using strata::detail::rendezvous_broadcast;
using strata::detail::rendezvous_config;
using strata::detail::rendezvous_fetch;
using strata::detail::rendezvous_server;

namespace {

std::vector<std::byte> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(gen() & 0xffu);
  return v;
}

// A port that was free a moment ago (the kernel hands out ephemeral ports in turn, so
// it is not handed out again at once).
int free_port() { return rendezvous_server(0, "127.0.0.1").port(); }

// What f throws as an E, or "(none)".
template <class E = strata::comm_error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(none)";
}

rendezvous_config config(int port, int rank, int world) {
  rendezvous_config c;
  c.master_addr = "127.0.0.1";
  c.master_port = port;
  c.rank = c.local_rank = rank;
  c.world_size = world;
  c.timeout = 20s;
  return c;
}

struct env_var {
  std::string name;
  env_var(std::string n, const char* value) : name(std::move(n)) {
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~env_var() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("every rank receives rank 0's bytes") {
  const int world = 4;
  const auto payload = random_bytes(128, 1);  // the size of an ncclUniqueId
  rendezvous_server server(0, "127.0.0.1");
  std::vector<std::vector<std::byte>> got(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 1; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        got[r] = rendezvous_fetch("127.0.0.1", server.port(), r, world, 20s);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  server.serve(payload, world, 20s);
  for (auto& t : ranks) t.join();
  for (int r = 1; r < world; ++r) {
    INFO("rank " << r);
    CHECK_FALSE(errors[r]);
    CHECK(got[r] == payload);
  }
}

TEST_CASE("ranks that start before rank 0 retry until it listens") {
  const int world = 3;
  const int port = free_port();
  const auto payload = random_bytes(64, 2);
  std::vector<std::vector<std::byte>> got(world);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 1; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        rendezvous_config c = config(port, r, world);
        got[r] = rendezvous_broadcast(c, {});
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  std::this_thread::sleep_for(300ms);
  rendezvous_config c0 = config(port, 0, world);
  CHECK(rendezvous_broadcast(c0, payload) == payload);
  for (auto& t : ranks) t.join();
  for (int r = 1; r < world; ++r) {
    CHECK_FALSE(errors[r]);
    CHECK(got[r] == payload);
  }
}

TEST_CASE("a rank times out with a clear error when rank 0 is absent") {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  const std::string msg = error_of([&] { rendezvous_fetch("127.0.0.1", port, 1, 2, 500ms); });
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(msg.find("rank 1 with rank 0 at 127.0.0.1:" + std::to_string(port) + ": could not connect within 0.5 s") !=
        std::string::npos);
  CHECK(msg.find("MASTER_ADDR and MASTER_PORT") != std::string::npos);
  CHECK(took >= 400ms);
  CHECK(took < 5s);
}

TEST_CASE("rank 0 times out naming the ranks that never came") {
  const int world = 4;
  rendezvous_server server(0, "127.0.0.1");
  std::exception_ptr error;
  std::thread rank1([&] {
    try {
      rendezvous_fetch("127.0.0.1", server.port(), 1, world, 20s);
    } catch (...) {
      error = std::current_exception();
    }
  });
  const std::string msg = error_of([&] { server.serve(random_bytes(8, 3), world, 1s); });
  rank1.join();
  CHECK(msg.find("rank(s) 2, 3 of 4 did not connect") != std::string::npos);
  // Rank 1 is not served a world that will never be whole: it hears why, at once.
  REQUIRE(error);
  CHECK(error_of([&] { std::rethrow_exception(error); })
            .find("rank 0 rejected this rank: rank 0 (port " + std::to_string(server.port()) +
                  ") waited 1 s; rank(s) 2, 3 of 4 did not connect") != std::string::npos);
}

TEST_CASE("a rank with another WORLD_SIZE is refused, told why, and the job goes on") {
  rendezvous_server server(0, "127.0.0.1");
  const auto payload = random_bytes(8, 4);
  std::thread rank0([&] { server.serve(payload, 2, 20s); });
  const std::string stray = error_of([&] { rendezvous_fetch("127.0.0.1", server.port(), 1, 3, 20s); });
  const auto got = rendezvous_fetch("127.0.0.1", server.port(), 1, 2, 20s);  // the real rank 1, after it
  rank0.join();
  CHECK(stray.find("rank 0 rejected this rank: rank 0 refused this rank: rank 1 says WORLD_SIZE=3, rank 0 has "
                   "WORLD_SIZE=2") != std::string::npos);
  CHECK(got == payload);
}

TEST_CASE("a second process with a taken RANK is refused; the first keeps its place") {
  rendezvous_server server(0, "127.0.0.1");
  const auto payload = random_bytes(8, 5);
  std::thread rank0([&] { server.serve(payload, 3, 20s); });
  std::vector<std::byte> first, third;
  std::thread a([&] { first = rendezvous_fetch("127.0.0.1", server.port(), 1, 3, 20s); });
  std::this_thread::sleep_for(300ms);  // the first rank 1 is in
  const std::string second = error_of([&] { rendezvous_fetch("127.0.0.1", server.port(), 1, 3, 20s); });
  third = rendezvous_fetch("127.0.0.1", server.port(), 2, 3, 20s);
  a.join();
  rank0.join();
  CHECK(second.find("rank 1 has come already (two processes with the same RANK?)") != std::string::npos);
  CHECK(first == payload);
  CHECK(third == payload);
}

TEST_CASE("a rank whose process died after its hello may come again: its new process takes the place") {
  rendezvous_server server(0, "127.0.0.1");
  const auto payload = random_bytes(8, 6);
  const int port = server.port();
  // The first rank 1 is a process of its own, forked while this one has no other thread;
  // it says hello and waits for the reply until it is killed, as a pod restarted mid-wait.
  const pid_t first = ::fork();
  REQUIRE(first >= 0);
  if (first == 0) {
    try {
      (void)rendezvous_fetch("127.0.0.1", port, 1, 3, 60s);
    } catch (...) {
    }
    ::_exit(0);
  }
  std::thread rank0([&] { server.serve(payload, 3, 20s); });
  std::this_thread::sleep_for(500ms);  // its hello is in
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  std::vector<std::byte> again, third;
  std::thread a([&] { again = rendezvous_fetch("127.0.0.1", port, 1, 3, 20s); });
  third = rendezvous_fetch("127.0.0.1", port, 2, 3, 20s);
  a.join();
  rank0.join();
  CHECK(again == payload);
  CHECK(third == payload);
}

TEST_CASE("a rank that started long before rank 0 still hears which ranks never came") {
  // Rank 1's own time-out (1 s) would end before rank 0's, which begins 0.6 s later: it
  // waits for rank 0's answer rather than failing first with nothing to say.
  rendezvous_server server(0, "127.0.0.1");
  const int port = server.port();
  std::string heard;
  std::thread rank1([&] { heard = error_of([&] { rendezvous_fetch("127.0.0.1", port, 1, 3, 1s); }); });
  std::this_thread::sleep_for(600ms);  // rank 1 is connected (in the backlog) and waits for its challenge
  const std::string msg = error_of([&] { server.serve(random_bytes(8, 8), 3, 1s); });
  rank1.join();
  CHECK(msg.find("rank(s) 2 of 3 did not connect") != std::string::npos);
  INFO(heard);
  CHECK(heard.find("rank 0 rejected this rank: rank 0 (port " + std::to_string(port) +
                   ") waited 1 s; rank(s) 2 of 3 did not connect") != std::string::npos);
}

TEST_CASE("rank 0 listens on every address of its host: a rank that reaches only one is served") {
  const int world = 3;
  const auto payload = random_bytes(32, 9);
  rendezvous_server server(0, std::vector<std::string>{"127.0.0.1", "127.0.0.2"});
  CHECK(server.where() == "127.0.0.1,127.0.0.2:" + std::to_string(server.port()));
  std::vector<std::vector<std::byte>> got(world);
  std::thread a([&] { got[1] = rendezvous_fetch("127.0.0.1", server.port(), 1, world, 20s); });
  std::thread b([&] { got[2] = rendezvous_fetch("127.0.0.2", server.port(), 2, world, 20s); });
  server.serve(payload, world, 20s);
  a.join();
  b.join();
  CHECK(got[1] == payload);
  CHECK(got[2] == payload);
}

TEST_CASE("an all-to-all through rank 0 gives each rank the part every rank made for it") {
  const int world = 4;
  const int port = free_port();
  // Rank r's part for rank q: 3 bytes {r, q, 7}, one part per rank, in rank order.
  const auto parts_of = [&](int r) {
    std::vector<std::byte> v;
    for (int q = 0; q < world; ++q)
      for (int x : {r, q, 7}) v.push_back(static_cast<std::byte>(x));
    return v;
  };
  std::vector<std::vector<std::vector<std::byte>>> got(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      const auto mine = parts_of(r);
      got[r] = strata::detail::rendezvous_all_to_all(config(port, r, world), mine, "test");
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE(got[r].size() == static_cast<std::size_t>(world));
    for (int p = 0; p < world; ++p)
      CHECK(got[r][static_cast<std::size_t>(p)] ==
            std::vector<std::byte>{static_cast<std::byte>(p), static_cast<std::byte>(r), std::byte{7}});
  }
  auto one = config(port, 0, 1);
  CHECK(strata::detail::rendezvous_all_to_all(one, parts_of(0), "test").size() == 1);
  CHECK(error_of([&] {
          strata::detail::rendezvous_all_to_all(config(port, 1, 3), random_bytes(4, 1), "test");
        }).find("4 bytes is not 3 equal parts") != std::string::npos);
}

namespace {
// A stand-in for rank 0 that answers one hello with a reply head whose message and payload
// lengths are `message` and `payload`, sends `sent` bytes of them, and hangs up.
void answer_with_lengths(int listening, std::uint32_t message, std::uint64_t payload, std::size_t sent) {
  using namespace strata::detail::rendezvous_wire;
  strata::detail::socket_fd c(::accept(listening, nullptr, nullptr));
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  std::vector<unsigned char> in(preface_bytes);
  strata::detail::recv_all(c.get(), in.data(), in.size(), deadline, "test");
  std::vector<unsigned char> out(challenge_bytes, 0);
  put32(out.data(), magic);
  strata::detail::send_all(c.get(), out.data(), out.size(), deadline, "test");
  in.resize(body_bytes);
  strata::detail::recv_all(c.get(), in.data(), in.size(), deadline, "test");
  out.assign(reply_bytes + sent, 0);
  put32(out.data() + 4, message);
  put64(out.data() + 8, payload);
  strata::detail::send_all(c.get(), out.data(), out.size(), deadline, "test");
}

long peak_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
}  // namespace

TEST_CASE("the lengths of a reply not proved yet make a rank allocate only what arrives") {
  strata::detail::addr_list at("127.0.0.1", 0, true);
  strata::detail::socket_fd l(::socket(at.head->ai_family, at.head->ai_socktype, at.head->ai_protocol));
  REQUIRE(::bind(l.get(), at.head->ai_addr, at.head->ai_addrlen) == 0);
  REQUIRE(::listen(l.get(), 4) == 0);
  sockaddr_in self{};
  socklen_t len = sizeof self;
  ::getsockname(l.get(), reinterpret_cast<sockaddr*>(&self), &len);
  const int port = ntohs(self.sin_port);
  const long before = peak_rss_kib();
  SECTION("a payload of a TiB announced, 100 bytes sent") {
    std::thread fake([&] { answer_with_lengths(l.get(), 0, std::uint64_t{1} << 40, 100); });
    const std::string msg = error_of([&] { rendezvous_fetch("127.0.0.1", port, 1, 2, 20s); });
    fake.join();
    CHECK(msg.find("the peer closed the connection") != std::string::npos);
  }
  SECTION("a message of 4 GiB announced") {
    std::thread fake([&] { answer_with_lengths(l.get(), 0xffffffffu, 0, 0); });
    const std::string msg = error_of([&] { rendezvous_fetch("127.0.0.1", port, 1, 2, 20s); });
    fake.join();
    CHECK(msg.find("is not strata's rendezvous (a message of 4294967295 bytes; check MASTER_PORT)") !=
          std::string::npos);
  }
  // Allocated whole, the payload would be a terabyte (bad_alloc) and the message 4 GiB; a
  // megabyte's growth at most now.
  CHECK(peak_rss_kib() - before < 64 * 1024);
}

TEST_CASE("two ranks naming one GPU are a config_error on every rank, naming both") {
  const int world = 4;
  rendezvous_server server(0, "127.0.0.1");
  // Ranks 1 and 3 on node-b's 0000:41:00.0; rank 0 and 2 elsewhere.
  const std::vector<device_key> keys{
      {"node-a", "0000:41:00.0"}, {"node-b", "0000:41:00.0"}, {"node-b", "0000:c1:00.0"}, {"node-b", "0000:41:00.0"}};
  std::vector<std::string> msgs(world);
  std::vector<std::thread> ranks;
  for (int r = 1; r < world; ++r)
    ranks.emplace_back([&, r] {
      msgs[r] =
          error_of<strata::config_error>([&] { rendezvous_fetch("127.0.0.1", server.port(), r, world, 20s, keys[r]); });
    });
  msgs[0] =
      error_of<strata::config_error>([&] { server.serve(random_bytes(8, 6), world, 20s, keys[0], "world_nccl"); });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r << ": " << msgs[r]);
    CHECK(msgs[r].find("nccl communicator world_nccl: ranks 1 and 3 both use the GPU at PCI 0000:41:00.0 on node "
                       "node-b") != std::string::npos);
    CHECK(msgs[r].find("CUDA_VISIBLE_DEVICES") != std::string::npos);
  }
}

TEST_CASE("a shared device is found by sorting: the first two ranks of the lowest one, empty keys never") {
  using strata::detail::find_shared_device;
  const std::vector<device_key> none{{}, {}, {"n", "a"}, {"n", "b"}};
  CHECK_FALSE(find_shared_device(none));
  const std::vector<device_key> two_groups{{"n", "c"}, {}, {"n", "b"}, {"n", "c"}, {"n", "b"}, {"n", "b"}, {}};
  const auto shared = find_shared_device(two_groups);
  REQUIRE(shared);
  CHECK(*shared == std::pair{2, 4});  // "b" sorts before "c"
}

TEST_CASE("ranks on distinct GPUs, or naming none, are served") {
  const int world = 3;
  for (const bool named : {true, false}) {
    INFO((named ? "each rank names its GPU" : "no rank names a GPU"));
    rendezvous_server server(0, "127.0.0.1");
    const auto payload = random_bytes(128, 7);
    const auto key = [&](int r) {
      return named ? device_key{"node-a", "0000:0" + std::to_string(r) + ":00.0"} : device_key{};
    };
    std::vector<std::vector<std::byte>> got(world);
    std::vector<std::thread> ranks;
    for (int r = 1; r < world; ++r)
      ranks.emplace_back([&, r] { got[r] = rendezvous_fetch("127.0.0.1", server.port(), r, world, 20s, key(r)); });
    server.serve(payload, world, 20s, key(0));
    for (auto& t : ranks) t.join();
    for (int r = 1; r < world; ++r) CHECK(got[r] == payload);
  }
}

TEST_CASE("the launcher's variables are read and checked") {
  SECTION("all set") {
    env_var a("MASTER_ADDR", "node-0"), p("MASTER_PORT", "29500"), r("RANK", "3"), w("WORLD_SIZE", "8"),
        l("LOCAL_RANK", "1");
    const auto c = rendezvous_config::from_env();
    CHECK(c.master_addr == "node-0");
    CHECK(c.master_port == 29500);
    CHECK(c.rank == 3);
    CHECK(c.world_size == 8);
    CHECK(c.local_rank == 1);
  }
  SECTION("LOCAL_RANK defaults to 0") {
    env_var a("MASTER_ADDR", "node-0"), p("MASTER_PORT", "29500"), r("RANK", "0"), w("WORLD_SIZE", "1"),
        l("LOCAL_RANK", nullptr);
    CHECK(rendezvous_config::from_env().local_rank == 0);
  }
  auto config_error_of = [] { return error_of<strata::config_error>([] { rendezvous_config::from_env(); }); };
  SECTION("MASTER_ADDR missing") {
    env_var a("MASTER_ADDR", nullptr), p("MASTER_PORT", "29500"), r("RANK", "0"), w("WORLD_SIZE", "2");
    CHECK(config_error_of().find("MASTER_ADDR is not set") != std::string::npos);
  }
  SECTION("a port that is not a port") {
    env_var a("MASTER_ADDR", "h"), p("MASTER_PORT", "70000"), r("RANK", "0"), w("WORLD_SIZE", "2");
    CHECK(config_error_of().find("MASTER_PORT=\"70000\" is not an integer in [1, 65535]") != std::string::npos);
  }
  SECTION("a rank outside the world") {
    env_var a("MASTER_ADDR", "h"), p("MASTER_PORT", "1234"), r("RANK", "2"), w("WORLD_SIZE", "2");
    CHECK(config_error_of().find("RANK=\"2\" is not an integer in [0, 1]") != std::string::npos);
  }
  SECTION("torchrun's agent store holds MASTER_PORT: the next port, as a launch by these variables takes") {
    env_var a("MASTER_ADDR", "node-0"), p("MASTER_PORT", "29500"), r("RANK", "1"), w("WORLD_SIZE", "2"),
        s("TORCHELASTIC_USE_AGENT_STORE", "True"), q("STRATA_RENDEZVOUS_PORT", nullptr);
    CHECK(rendezvous_config::from_env().master_port == 29501);
    CHECK(strata::detect_launch(false).master_port == 29501);
    env_var chosen("STRATA_RENDEZVOUS_PORT", "31000");
    CHECK(rendezvous_config::from_env().master_port == 31000);
  }
  SECTION("one process needs no rendezvous address") {
    env_var a("MASTER_ADDR", nullptr), p("MASTER_PORT", nullptr), r("RANK", "0"), w("WORLD_SIZE", "1");
    const auto c = rendezvous_config::from_env();
    CHECK(c.world_size == 1);
    // At once, with no socket and no address to resolve.
    const auto start = std::chrono::steady_clock::now();
    const auto payload = random_bytes(16, 7);
    CHECK(rendezvous_broadcast(c, payload) == payload);
    CHECK(strata::detail::rendezvous_all_gather(c, payload, "test") == std::vector<std::vector<std::byte>>{payload});
    CHECK(std::chrono::steady_clock::now() - start < 5s);
  }
  SECTION("WORLD_SIZE missing") {
    env_var a("MASTER_ADDR", "h"), p("MASTER_PORT", "1234"), r("RANK", "0"), w("WORLD_SIZE", nullptr);
    CHECK(config_error_of().find("WORLD_SIZE is not set") != std::string::npos);
  }
}
