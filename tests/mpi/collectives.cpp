// strata-ranks: 1 2 4
// strata-gloo-ranks: 2 4
// Every collective and point-to-point operation of the world communicator (mpi_comm under
// mpiexec, gloo_comm under scripts/launch) against a serial reference that each rank
// computes from the inputs of all ranks (which are functions of rank and index).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/communicator.hpp>
#include <strata/comm/environment.hpp>
#include <strata/observe/resident.hpp>

#include "catch.hpp"

using strata::reduce_op;

static_assert(strata::communicator<strata::mpi_comm>);

namespace {

constexpr std::size_t sizes[] = {1, 7, 1000003};
constexpr reduce_op ops[] = {reduce_op::sum, reduce_op::avg, reduce_op::max, reduce_op::min};

// Small integers: exact in bf16/fp16 and every partial sum of up to 16 ranks stays exact
// (|sum| <= 128 < 256), so the result does not depend on MPI's reduction order.
template <class T>
T value(int rank, std::size_t i) {
  const long v = static_cast<long>((i * 7 + static_cast<std::size_t>(rank) * 13) % 17);
  if constexpr (std::is_unsigned_v<T>) {
    if constexpr (sizeof(T) == 8)
      return static_cast<T>((std::uint64_t{1} << 40) + static_cast<std::uint64_t>(v));
    else
      return static_cast<T>(v);
  } else {
    return strata::round_to<T>(static_cast<float>(v - 8));
  }
}

template <class T>
std::vector<T> values(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(rank, i);
  return v;
}

// The reference: op over ranks 0..p-1 of value(r, i), avg dividing the exact sum once.
template <class T>
T reduced(int p, std::size_t i, reduce_op op) {
  using acc = std::conditional_t<std::is_same_v<T, double>, double,
                                 std::conditional_t<std::is_floating_point_v<T> || sizeof(T) == 2, float, T>>;
  acc s = static_cast<acc>(value<T>(0, i));
  for (int r = 1; r < p; ++r) {
    const acc x = static_cast<acc>(value<T>(r, i));
    if (op == reduce_op::max)
      s = std::max(s, x);
    else if (op == reduce_op::min)
      s = std::min(s, x);
    else
      s = static_cast<acc>(s + x);
  }
  if (op == reduce_op::avg) s = static_cast<acc>(s / static_cast<acc>(p));
  if constexpr (sizeof(T) == 2)
    return T(s);
  else
    return static_cast<T>(s);
}

template <class T>
void require_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = got.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == want[i])) {
      bad = i;
      break;
    }
  if (bad != got.size()) {
    INFO(what << ": first mismatch at " << bad << " of " << got.size() << ": got " << +got[bad] << ", want "
              << +want[bad]);
    FAIL();
  }
}

// Catch2 v2 and v3 name their substring matcher differently.
#define REQUIRE_CONTAINS(text, part)                \
  do {                                              \
    const std::string text_ = (text);               \
    INFO(text_);                                    \
    REQUIRE(text_.find(part) != std::string::npos); \
  } while (0)

std::string label(const char* op, std::size_t n, reduce_op r = reduce_op::sum) {
  return std::string(op) + " n=" + std::to_string(n) + " op=" + std::string(strata::name_of(r));
}

template <class T>
void check_reductions(strata::world_comm& c, std::span<const reduce_op> which) {
  const int p = c.size(), me = c.rank();
  for (std::size_t n : sizes)
    for (reduce_op op : which) {
      auto data = values<T>(me, n);
      c.all_reduce(std::span(data), op);
      std::vector<T> want(n);
      for (std::size_t i = 0; i < n; ++i) want[i] = reduced<T>(p, i, op);
      require_equal(data, want, label("all_reduce", n, op));

      const auto in = values<T>(me, n * static_cast<std::size_t>(p));
      std::vector<T> out(n);
      c.reduce_scatter(std::span(in), std::span(out), op);
      for (std::size_t i = 0; i < n; ++i) want[i] = reduced<T>(p, static_cast<std::size_t>(me) * n + i, op);
      require_equal(out, want, label("reduce_scatter", n, op));
    }
}

template <class T>
void check_movement(strata::world_comm& c) {
  const int p = c.size(), me = c.rank();
  for (std::size_t n : sizes) {
    const auto mine = values<T>(me, n);
    std::vector<T> want(n * static_cast<std::size_t>(p));
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < n; ++i) want[static_cast<std::size_t>(r) * n + i] = value<T>(r, i);

    std::vector<T> out(want.size());
    c.all_gather(std::span(mine), std::span(out));
    require_equal(out, want, label("all_gather", n));

    // In place: the input is this rank's own block of the output.
    std::vector<T> inplace(want.size(), value<T>(99, 0));
    std::copy(mine.begin(), mine.end(), inplace.begin() + static_cast<std::ptrdiff_t>(me * n));
    c.all_gather(std::span(inplace).subspan(static_cast<std::size_t>(me) * n, n), std::span(inplace));
    require_equal(inplace, want, label("all_gather in place", n));

    for (int root : {0, p - 1}) {
      auto data = me == root ? values<T>(root, n) : std::vector<T>(n);
      c.broadcast(std::span(data), root);
      require_equal(data, values<T>(root, n), label("broadcast", n) + " root=" + std::to_string(root));
    }

    // A ring: receive from the previous rank while sending to the next (size 1: to oneself).
    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    std::vector<T> got(n);
    auto r = c.recv_async(std::span(got), prev, 5);
    c.send(std::span(mine), next, 5);
    r.wait();
    require_equal(got, values<T>(prev, n), label("send/recv ring", n));
  }
}

}  // namespace

TEMPLATE_TEST_CASE("all_reduce and reduce_scatter match a serial reduction", "[collectives]", float, double,
                   strata::bf16, strata::fp16) {
  strata::environment env;
  check_reductions<TestType>(env.world(), ops);
}

TEMPLATE_TEST_CASE("integer reductions", "[collectives]", std::int32_t, std::int64_t, std::uint8_t, std::uint64_t) {
  strata::environment env;
  check_reductions<TestType>(env.world(), ops);
}

TEMPLATE_TEST_CASE("all_gather, broadcast and send/recv move data exactly", "[collectives]", float, double,
                   strata::bf16, std::uint8_t) {
  strata::environment env;
  check_movement<TestType>(env.world());
}

TEST_CASE("bf16 and fp16 sums round to nearest even once per pairwise step", "[collectives]") {
  strata::environment env;
  auto& w = env.world();
  if (w.size() != 2) return;  // with two ranks there is exactly one step, so the result is fixed
  const std::size_t n = 4096;
  std::vector<strata::bf16> b(n), bw(n);
  std::vector<strata::fp16> h(n), hw(n);
  auto x = [](int r, std::size_t i) {
    return 1.0f + static_cast<float>((i * 2654435761u + r * 40503u) % 100003u) / 7.0f;
  };
  for (std::size_t i = 0; i < n; ++i) {
    b[i] = strata::bf16(x(w.rank(), i));
    h[i] = strata::fp16(x(w.rank(), i) / 64.0f);
    bw[i] = strata::bf16(static_cast<float>(strata::bf16(x(0, i))) + static_cast<float>(strata::bf16(x(1, i))));
    hw[i] = strata::fp16(static_cast<float>(strata::fp16(x(0, i) / 64.0f)) +
                         static_cast<float>(strata::fp16(x(1, i) / 64.0f)));
  }
  w.all_reduce(std::span(b));
  w.all_reduce(std::span(h));
  require_equal(b, bw, "bf16 sum");
  require_equal(h, hw, "fp16 sum");
}

TEST_CASE("asynchronous operations complete in order and leave correct results", "[collectives][async]") {
  strata::environment env;
  auto& w = env.world();
  const int p = w.size(), me = w.rank();
  const std::size_t n = 1000003;
  auto a = values<float>(me, n);
  auto mine = values<double>(me, 7);
  std::vector<double> gathered(7 * static_cast<std::size_t>(p));
  auto bc = me == 0 ? values<strata::bf16>(0, n) : std::vector<strata::bf16>(n);
  std::vector<float> got(n);
  const int next = (me + 1) % p, prev = (me + p - 1) % p;

  // Stream order: a collective queued after a receive starts once the receive completed,
  // so each receive's matching send is queued before the next collective. Consecutive
  // sends and receives are in flight together, which is what lets a ring exchange proceed.
  auto r1 = w.all_reduce_async(std::span(a), reduce_op::max);
  auto r2 = w.all_gather_async(std::span(mine), std::span(gathered));
  auto r3 = w.recv_async(std::span(got), prev, 1);
  std::vector<float> none;
  auto r4 = w.recv_async(std::span(none), prev, 2);  // an empty message is a message
  auto src = values<float>(me, n);
  auto r5 = w.send_async(std::span(std::as_const(src)).first(0), next, 2);
  auto r6 = w.send_async(std::span(std::as_const(src)), next, 1);
  auto r7 = w.broadcast_async(std::span(bc), 0);
  auto r8 = w.barrier_async();
  REQUIRE(r1.pending());
  // Waiting out of order is fine: completion is in order.
  r8.wait();
  REQUIRE(r3.test());
  REQUIRE(r1.test());
  r2.wait();
  while (!r7.test()) {
  }
  r4.wait();
  r5.wait();
  r6.wait();
  REQUIRE_FALSE(r1.pending());

  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = reduced<float>(p, i, reduce_op::max);
  require_equal(a, want, "all_reduce_async max");
  std::vector<double> gw;
  for (int r = 0; r < p; ++r)
    for (double v : values<double>(r, 7)) gw.push_back(v);
  require_equal(gathered, gw, "all_gather_async");
  require_equal(bc, values<strata::bf16>(0, n), "broadcast_async");
  require_equal(got, values<float>(prev, n), "recv_async");
}

TEST_CASE("messages are matched by tag, not by order of posting", "[collectives][p2p]") {
  strata::environment env;
  auto& w = env.world();
  const int p = w.size(), me = w.rank(), next = (me + 1) % p, prev = (me + p - 1) % p;
  auto one = values<std::int64_t>(me, 3), two = values<std::int64_t>(me + 1, 5);
  std::vector<std::int64_t> got_two(5), got_one(3);
  auto a = w.recv_async(std::span(got_two), prev, 2);
  auto b = w.recv_async(std::span(got_one), prev, 1);
  auto s1 = w.send_async(std::span(std::as_const(one)), next, 1);
  auto s2 = w.send_async(std::span(std::as_const(two)), next, 2);
  a.wait();
  b.wait();
  require_equal(got_one, values<std::int64_t>(prev, 3), "tag 1");
  require_equal(got_two, values<std::int64_t>(prev + 1, 5), "tag 2");
}

TEST_CASE("split makes communicators by color, ordered by key", "[collectives][split]") {
  strata::environment env;
  auto& w = env.world();
  const int p = w.size(), me = w.rank();
  auto half = w.split(me % 2, -me);  // reversed: the highest rank of each parity is rank 0
  int members = 0, position = 0, sum = 0;
  for (int r = 0; r < p; ++r)
    if (r % 2 == me % 2) {
      ++members;
      sum += r;
      if (r > me) ++position;
    }
  REQUIRE(half.size() == members);
  REQUIRE(half.rank() == position);
  std::vector<std::int32_t> v{me};
  half.all_reduce(std::span(v));
  REQUIRE(v[0] == sum);

  // A split of a split, and traffic on the parent interleaved with the child's.
  auto single = half.split(half.rank(), 0);
  REQUIRE(single.size() == 1);
  std::vector<double> x{1.5};
  single.all_reduce(std::span(x));
  w.all_reduce(std::span(x));
  REQUIRE(x[0] == 1.5 * p);
  REQUIRE_THROWS_AS(w.split(-1, 0), strata::comm_error);
}

// A communicator made and dropped at once: a rank that drops it early must not break a
// peer still connecting (Gloo's listening side saw the connection closed and threw, about
// one split in a few hundred; this loop failed 2 runs in 3 at 4 ranks).
TEST_CASE("a split dropped as soon as it is made never fails a peer", "[collectives][split]") {
  strata::environment env;
  auto& w = env.world();
  const int me = w.rank();
  for (int i = 0; i < 300; ++i) {
    auto s = w.split((me + i) % 2, me);  // the ranks of my parity, under alternating colors
    REQUIRE(s.size() == w.size() / 2 + (me % 2 == 0 ? w.size() % 2 : 0));
  }
  std::vector<std::int32_t> v{1};
  w.all_reduce(std::span(v));
  REQUIRE(v[0] == w.size());
}

TEST_CASE("buffers over the int count limit are sent in chunks", "[collectives][chunks]") {
  strata::environment env;
  if (!env.world().get_if<strata::mpi_comm>()) return;  // MPI's int counts only
  // A communicator of its own whose chunk limit is 1000 elements stands in for INT_MAX.
  strata::mpi_comm c(MPI_COMM_WORLD, "chunked");
  strata::detail::mpi_testing::set_chunk(c, 1000);
  const int p = c.size(), me = c.rank();
  for (std::size_t n : {std::size_t{999}, std::size_t{1000}, std::size_t{2000}, std::size_t{1000003}}) {
    auto data = values<strata::bf16>(me, n);
    c.all_reduce(std::span(data), reduce_op::avg);
    std::vector<strata::bf16> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = reduced<strata::bf16>(p, i, reduce_op::avg);
    require_equal(data, want, label("chunked all_reduce", n, reduce_op::avg));

    const auto in = values<float>(me, n * static_cast<std::size_t>(p));
    std::vector<float> out(n), rs(n);
    c.reduce_scatter(std::span(in), std::span(out), reduce_op::min);
    for (std::size_t i = 0; i < n; ++i) rs[i] = reduced<float>(p, static_cast<std::size_t>(me) * n + i, reduce_op::min);
    require_equal(out, rs, label("chunked reduce_scatter", n, reduce_op::min));

    const auto mine = values<float>(me, n);
    std::vector<float> all(n * static_cast<std::size_t>(p)), all_want;
    for (int r = 0; r < p; ++r)
      for (float v : values<float>(r, n)) all_want.push_back(v);
    c.all_gather(std::span(mine), std::span(all));
    require_equal(all, all_want, label("chunked all_gather", n));

    auto b = me == p - 1 ? values<float>(p - 1, n) : std::vector<float>(n);
    c.broadcast(std::span(b), p - 1);
    require_equal(b, values<float>(p - 1, n), label("chunked broadcast", n));

    const int next = (me + 1) % p, prev = (me + p - 1) % p;
    std::vector<float> got(n);
    auto r = c.recv_async(std::span(got), prev, 9);
    c.send(std::span(mine), next, 9);
    r.wait();
    require_equal(got, values<float>(prev, n), label("chunked send/recv", n));
  }
}

TEST_CASE("a reduce_scatter holds one block more on any rank, not the whole buffer twice on rank 0",
          "[collectives][memory]") {
  strata::environment env;
  auto& w = env.world();
  const int p = w.size(), me = w.rank();
  // 16 MiB in all: above the size where blocks are reduced to their owners one by one.
  const std::size_t n = (std::size_t{16} << 20) / sizeof(float) / static_cast<std::size_t>(p);
  const auto in = values<float>(me, n * static_cast<std::size_t>(p));
  std::vector<float> out(n, 1.0f), want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = reduced<float>(p, static_cast<std::size_t>(me) * n + i, reduce_op::sum);
  REQUIRE(strata::reset_peak_resident());
  const std::size_t before = strata::resident_bytes();
  w.reduce_scatter(std::span(in), std::span(out), reduce_op::sum);
  const std::size_t grew = strata::peak_resident_bytes() - before;
  require_equal(out, want, label("large reduce_scatter", n, reduce_op::sum));
  // Open MPI's one-call reduce_scatter grows rank 0 by about twice the 16 MiB buffer.
  INFO("rank " << me << ": peak grew by " << grew / 1024 << " KiB over a reduce_scatter of " << (n * p * 4) / 1024
               << " KiB");
  CHECK(grew <= n * sizeof(float) + (std::size_t{2} << 20));
}

TEST_CASE("bad arguments and failed operations are comm_errors naming the problem", "[collectives][errors]") {
  strata::environment env;
  auto& w = env.world();
  const int p = w.size(), me = w.rank(), next = (me + 1) % p, prev = (me + p - 1) % p;
  std::vector<float> in(10), out(3);
  auto what = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const strata::comm_error& e) {
      return e.what();
    }
    return "no comm_error";
  };
  // Argument checks happen on the caller's thread before anything is queued.
  const auto rs = what([&] { w.reduce_scatter(std::span(in), std::span(out)); });
  if (static_cast<std::size_t>(p) * 3 != 10) REQUIRE_CONTAINS(rs, "reduce_scatter on world");
  REQUIRE_CONTAINS(what([&] { w.broadcast(std::span(in), p); }), "broadcast root");
  REQUIRE_CONTAINS(what([&] { w.all_gather(std::span(in).first(3), std::span(in)); }), "all_gather on world");
  REQUIRE_CONTAINS(what([&] { w.send(std::span(in), 0, -1); }), "tag -1");

  std::vector<float> one{1.0f};
  // Gloo has no pair from a rank to itself: a message to oneself is refused up front,
  // never queued to hang.
  if (w.backend() == "gloo") {
    REQUIRE_CONTAINS(what([&] { w.send(std::span(in), me, 1); }), "cannot message itself over gloo");
    REQUIRE_CONTAINS(what([&] { (void)w.recv_async(std::span(in), me, 1); }), "cannot message itself over gloo");
  }

  // Under MPI a message of another size fails on the lane and is rethrown to the waiter,
  // and the communicator stays usable. (Gloo ends the connection, so a test there could not
  // go on; tests/examples/launch_env.sh checks that a peer that dies or stalls is named.)
  if (w.backend() != "mpi") {
    w.all_reduce(std::span(one));
    REQUIRE(one[0] == static_cast<float>(p));
    return;
  }
  std::vector<float> five(5, 1.0f), six(6);
  auto r = w.recv_async(std::span(six), prev, 4);
  w.send(std::span(five), next, 4);
  REQUIRE_CONTAINS(what([&] { r.wait(); }), "recv of 6 elements");
  // Open MPI 4.1 reports no truncation when a process sends to itself, so a message
  // that is too long is checked between different processes only.
  if (p > 1) {
    std::vector<float> big(8);
    auto r2 = w.recv_async(std::span(six), prev, 6);
    w.send(std::span(big), next, 6);
    REQUIRE_CONTAINS(what([&] { r2.wait(); }), "recv of 6 elements from rank");
  }
  w.all_reduce(std::span(one));
  REQUIRE(one[0] == static_cast<float>(p));
}
