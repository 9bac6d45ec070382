// Gloo communicators formed in one process, one thread a rank, over 127.0.0.1: the world
// through the rendezvous's all-to-all, and splits whose members send each other their
// pair addresses in rounds of 16 — a group of 18 takes two windows, groups of another
// size take part beside it. Each group's all_reduce then sums exactly its members.
#include <strata/core/config.hpp>

#include "catch.hpp"

#if STRATA_HAS_GLOO
#include <stdlib.h>

#include <exception>
#include <strata/comm/detail/rendezvous.hpp>
#include <strata/comm/gloo.hpp>
#include <thread>
#include <vector>

TEST_CASE("gloo worlds and splits connect beyond one window of rounds") {
  constexpr int world = 18;
  // A broken exchange leaves ranks waiting in Gloo's connect: fail within a minute, not five.
  ::setenv("STRATA_COMM_TIMEOUT", "30", 0);
  const int port = strata::detail::rendezvous_server(0, "127.0.0.1").port();
  std::vector<int> everyone(world, -1), by_three(world, -1), ranks_in_three(world, -1);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        strata::detail::rendezvous_config c;
        c.master_addr = "127.0.0.1";
        c.master_port = port;
        c.rank = c.local_rank = r;
        c.world_size = world;
        c.timeout = std::chrono::seconds(120);
        auto w = strata::gloo_comm::world(c);
        // Every rank, in reverse order: one group of 18.
        auto all = w.split(0, world - r);
        std::vector<int> v{r};
        all.all_reduce(std::span(v));
        everyone[static_cast<std::size_t>(r)] = v[0];
        CHECK(all.rank() == world - 1 - r);
        // Three groups of 6: ranks r % 3 == g.
        auto three = w.split(r % 3, r);
        std::vector<int> u{r};
        three.all_reduce(std::span(u));
        by_three[static_cast<std::size_t>(r)] = u[0];
        ranks_in_three[static_cast<std::size_t>(r)] = three.size();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < world; ++r) {
    INFO("rank " << r);
    REQUIRE_FALSE(errors[static_cast<std::size_t>(r)]);
    CHECK(everyone[static_cast<std::size_t>(r)] == world * (world - 1) / 2);
    int sum = 0;
    for (int q = r % 3; q < world; q += 3) sum += q;
    CHECK(by_three[static_cast<std::size_t>(r)] == sum);
    CHECK(ranks_in_three[static_cast<std::size_t>(r)] == world / 3);
  }
}
#endif
