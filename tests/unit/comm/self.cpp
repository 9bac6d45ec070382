// self_comm: the single-process communicator that needs no MPI. Collectives are identities
// or copies; messages to oneself are matched by tag, in order; waiting forever is an error.
#include <numeric>
#include <string>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/comm/self.hpp>
#include "catch.hpp"
#include "error_text.hpp"

using strata::reduce_op;
using strata::self_comm;

static_assert(strata::communicator<self_comm>);
static_assert(strata::detail::check_communicator<self_comm>());
static_assert(!strata::communicator<int>);

namespace {
template <class F>
std::string comm_error_of(F&& f) {
  return strata_test::error_text_of<strata::comm_error>(f);
}
bool contains(const std::string& s, const char* part) { return strata_test::has_text(s, part); }
}  // namespace

TEST_CASE("self_comm collectives with one process", "[self]") {
  self_comm c;
  REQUIRE(c.rank() == 0);
  REQUIRE(c.size() == 1);
  std::vector<float> x{1.5f, -2.0f, 3.25f};
  const auto x0 = x;
  for (auto op : {reduce_op::sum, reduce_op::avg, reduce_op::max, reduce_op::min}) {
    c.all_reduce(std::span(x), op);
    REQUIRE(x == x0);
  }
  std::vector<strata::bf16> h{strata::bf16(1.5f)};
  c.all_reduce_async(std::span(h), reduce_op::avg).wait();
  REQUIRE(static_cast<float>(h[0]) == 1.5f);

  std::vector<double> out(3);
  const std::vector<double> in{1, 2, 3};
  c.reduce_scatter(std::span(in), std::span(out));
  REQUIRE(out == std::vector<double>{1, 2, 3});
  std::vector<double> gathered(3);
  c.all_gather(std::span<const double>(out), std::span(gathered));
  REQUIRE(gathered == out);
  c.all_gather(std::span(gathered), std::span(gathered));  // in place: the input is block 0
  REQUIRE(gathered == out);
  c.broadcast(std::span(x), 0);
  REQUIRE(x == x0);
  c.barrier();
  auto r = c.barrier_async();
  REQUIRE(r.test());

  REQUIRE(contains(comm_error_of([&] { c.reduce_scatter(std::span(in), std::span(out).first(2)); }),
                   "reduce_scatter on self"));
  REQUIRE(contains(comm_error_of([&] { c.all_gather(std::span(x).first(2), std::span(x)); }), "all_gather on self"));
  REQUIRE(contains(comm_error_of([&] { c.broadcast(std::span(x), 1); }), "broadcast root 1"));
}

TEST_CASE("self_comm messages to oneself are matched by tag in order", "[self]") {
  self_comm c;
  std::vector<int> a{1, 2, 3}, b{4, 5}, got3(3), got2(2);
  c.send(std::span<const int>(a), 0, 7);
  c.send(std::span<const int>(b), 0, 8);
  c.recv(std::span(got2), 0, 8);
  c.recv(std::span(got3), 0, 7);
  REQUIRE(got3 == a);
  REQUIRE(got2 == b);

  // A receive posted before its send completes when the send arrives.
  std::vector<int> later(3);
  auto r = c.recv_async(std::span(later), 0, 1);
  REQUIRE_FALSE(r.test());
  c.send(std::span<const int>(a), 0, 1);
  REQUIRE(r.test());
  REQUIRE(later == a);

  // Two messages with one tag arrive in the order they were sent.
  std::vector<std::int64_t> m1{10}, m2{20}, g1(1), g2(1);
  auto q1 = c.recv_async(std::span(g1), 0, 3);
  c.send(std::span<const std::int64_t>(m1), 0, 3);
  c.send(std::span<const std::int64_t>(m2), 0, 3);
  c.recv(std::span(g2), 0, 3);
  q1.wait();
  REQUIRE(g1[0] == 10);
  REQUIRE(g2[0] == 20);
}

TEST_CASE("self_comm refuses what would wait forever or mismatch", "[self]") {
  self_comm c("solo");
  std::vector<float> f(4);
  REQUIRE(contains(comm_error_of([&] { c.recv(std::span(f), 0, 2); }), "would wait forever"));
  REQUIRE(contains(comm_error_of([&] {
                     auto r = c.recv_async(std::span(f), 0, 2);
                     r.wait();
                   }),
                   "no matching send"));
  std::vector<double> d(4);
  c.send(std::span<const double>(d), 0, 5);
  REQUIRE(contains(comm_error_of([&] { c.recv(std::span(f), 0, 5); }), "F64"));
  auto r = c.recv_async(std::span(f), 0, 6);
  std::vector<float> three(3);
  c.send(std::span<const float>(three), 0, 6);
  REQUIRE(contains(comm_error_of([&] { r.wait(); }), "expected 4 elements"));
  REQUIRE(contains(comm_error_of([&] { c.send(std::span(f), 1); }), "send destination 1 on solo"));
  REQUIRE(contains(comm_error_of([&] { c.send(std::span(f), 0, -3); }), "tag -3"));
}

TEST_CASE("self_comm split gives another single-process communicator", "[self]") {
  self_comm c;
  c.set_timeout(std::chrono::seconds(5));
  auto s = c.split(3, 0);
  REQUIRE(s.size() == 1);
  REQUIRE(s.rank() == 0);
  REQUIRE(s.name() == "self/3");
  REQUIRE(s.timeout() == std::chrono::seconds(5));
  REQUIRE_THROWS_AS(c.split(-1, 0), strata::comm_error);
  REQUIRE_THROWS_AS(c.set_timeout(std::chrono::seconds(0)), strata::config_error);
  self_comm moved = std::move(s);
  std::vector<int> v{1};
  moved.send(std::span<const int>(v), 0);
  std::vector<int> w(1);
  moved.recv(std::span(w), 0);
  REQUIRE(w == v);
}
