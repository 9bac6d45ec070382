// strata-gpu: required
// strata-ranks: 1 2 4
// mpi_device_comm: every rank on the one GPU of the machine. Each operation on device
// buffers must give the bits the host's mpi_comm gives for the same data (the same MPI
// operations, through pinned staging or CUDA-aware MPI), its result must be in the
// compute stream's order, and an operation on a buffer that an earlier one still writes
// must see that result. Bad input is a comm_error naming the operation.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <strata/comm/device_comm.hpp>
#include <strata/comm/environment.hpp>
#include <strata/comm/mpi_device.hpp>
#include <strata/space/cuda.hpp>
#include <strata/space/cuda_stream.hpp>
#include <string>
#include <vector>

#include "catch.hpp"
#include "error_text.hpp"
#include "support/device_data.hpp"

namespace {

strata::environment& env() {
  static strata::environment e;
  return e;
}
// Run under mpiexec, the world is MPI's: an mpi_device_comm is made over it.
strata::mpi_comm& mpi_world() {
  auto* m = env().world().get_if<strata::mpi_comm>();
  REQUIRE(m != nullptr);
  return *m;
}

using test::to_device;
using test::to_host;

// Different data on every rank, so a reduction that dropped or repeated a rank shows.
std::vector<float> rank_floats(std::size_t n, int salt) {
  return test::random_floats(n, static_cast<unsigned>(1000 * salt + env().rank()));
}
template <class F>
std::string comm_error_of(F&& f) {
  return strata_test::error_text_of<strata::comm_error>(f);
}
bool has(const std::string& s, const std::string& part) { return strata_test::has_text(s, part); }

// Each collective on the device against the host communicator on the same data.
void check_against_host(strata::mpi_device_comm& c, cudaStream_t cs) {
  auto& host = env().world();
  const int p = host.size(), me = host.rank();
  REQUIRE(c.size() == p);
  REQUIRE(c.rank() == me);
  const std::size_t n = 4099 * static_cast<std::size_t>(p);  // not a multiple of a staging block

  for (auto op : {strata::reduce_op::sum, strata::reduce_op::max, strata::reduce_op::avg}) {
    INFO("all_reduce " << name_of(op));
    auto expected = rank_floats(n, 1);
    auto x = to_device(expected);
    c.all_reduce(x.span(), op);
    host.all_reduce(std::span<float>(expected), op);
    CHECK(to_host(x, cs) == expected);
  }
  {
    INFO("all_reduce of bf16 (strata's own MPI op)");
    std::vector<strata::bf16> h;
    for (float f : rank_floats(1000, 2)) h.push_back(strata::bf16(f));
    auto x = to_device(h);
    c.all_reduce(x.span());
    host.all_reduce(std::span<strata::bf16>(h));
    CHECK(to_host(x, cs) == h);
  }
  {
    INFO("reduce_scatter");
    const auto in = rank_floats(n, 3);
    std::vector<float> expected(n / static_cast<std::size_t>(p));
    host.reduce_scatter(std::span<const float>(in), std::span<float>(expected));
    auto din = to_device(in);
    strata::cuda_buffer<float> out(expected.size());
    c.reduce_scatter(std::span<const float>(din.span()), out.span());
    CHECK(to_host(out, cs) == expected);
  }
  {
    INFO("all_gather, out of place and in place");
    const auto mine = rank_floats(n / static_cast<std::size_t>(p), 4);
    std::vector<float> expected(n);
    host.all_gather(std::span<const float>(mine), std::span<float>(expected));
    auto dmine = to_device(mine);
    strata::cuda_buffer<float> out(n);
    c.all_gather(std::span<const float>(dmine.span()), out.span());
    CHECK(to_host(out, cs) == expected);
    std::vector<float> placed(n, -1.0f);
    std::copy(mine.begin(), mine.end(), placed.begin() + static_cast<std::ptrdiff_t>(mine.size()) * me);
    auto inplace = to_device(placed);
    c.all_gather(std::span<const float>(inplace.data() + mine.size() * static_cast<std::size_t>(me), mine.size()),
                 inplace.span());
    CHECK(to_host(inplace, cs) == expected);
    // From pinned host memory (ZeRO-3's offloaded params).
    strata::pinned_buffer<float> from(mine.size());
    std::copy(mine.begin(), mine.end(), from.data());
    strata::cuda_buffer<float> g(n);
    c.all_gather_from_host_async(std::span<const float>(from.data(), mine.size()), g.span()).wait();
    CHECK(to_host(g, cs) == expected);
  }
  {
    INFO("broadcast from the last rank");
    auto expected = rank_floats(n, 5);
    auto x = to_device(expected);
    c.broadcast(x.span(), p - 1);
    host.broadcast(std::span<float>(expected), p - 1);
    CHECK(to_host(x, cs) == expected);
  }
  {
    INFO("a ring: send to the next rank, receive from the previous one (send_recv: also a self-exchange)");
    const auto mine = rank_floats(777, 6);
    std::vector<float> expected(mine.size());
    auto from_previous = host.recv_async(std::span<float>(expected), (me + p - 1) % p, 7);
    host.send(std::span<const float>(mine), (me + 1) % p, 7);
    from_previous.wait();
    auto out = to_device(mine);
    strata::cuda_buffer<float> in(mine.size());
    c.send_recv(std::span<const float>(out.span()), (me + 1) % p, in.span(), (me + p - 1) % p);
    CHECK(to_host(in, cs) == expected);
    if (p > 1) {  // separate sends and receives, posted in an order that needs them asynchronous
      strata::cuda_buffer<float> again(mine.size());
      auto r = c.recv_async(again.span(), (me + p - 1) % p, 3);
      c.send(std::span<const float>(out.span()), (me + 1) % p, 3);
      r.wait();
      CHECK(to_host(again, cs) == expected);
    }
  }
}

}  // namespace

TEST_CASE("every operation on device buffers gives the host communicator's bits, staged or CUDA-aware") {
  strata::select_device(env().local_rank());
  strata::cuda_stream compute;  // declared first: outlives the communicators
  for (const bool staged : {true, false}) {
    INFO((staged ? "staged through pinned memory" : "as this MPI allows (CUDA-aware where it says so)"));
    if (staged) ::setenv("STRATA_MPI_CUDA_AWARE", "0", 1);
    strata::mpi_device_comm c(mpi_world(), {.compute_stream = compute.get(), .name = "dev"});
    ::unsetenv("STRATA_MPI_CUDA_AWARE");
    if (staged) CHECK_FALSE(c.cuda_aware());
    CHECK(c.name() == "dev");
    check_against_host(c, compute.get());
    auto sub = c.split(env().rank() % 2, env().rank());
    CHECK(sub.name() == "dev/" + std::to_string(env().rank() % 2));
    CHECK(sub.size() == (env().size() + 1 - env().rank() % 2) / 2);
    c.barrier();
  }
}

TEST_CASE("results are in the compute stream's order, and a later operation sees an earlier one's result") {
  strata::select_device(env().local_rank());
  strata::cuda_stream compute;
  strata::mpi_device_comm c(mpi_world(), {.compute_stream = compute.get()});
  const float p = static_cast<float>(env().size());
  const std::size_t n = 1 << 20;
  // Written by the compute stream just before the operation: it must read these values.
  strata::cuda_buffer<float> x(n);
  std::vector<float> ones(n, 1.0f);
  strata::pinned_buffer<float> src(n);
  std::copy(ones.begin(), ones.end(), src.data());
  strata::cuda::copy_async(x.data(), src.data(), x.bytes(), compute.get());
  // Two sums of the same buffer, the second before the first was waited for: p, then p * p.
  auto first = c.all_reduce_async(x.span());
  auto second = c.all_reduce_async(x.span());
  second.wait();
  first.wait();
  const auto got = to_host(x, compute.get());
  CHECK(std::all_of(got.begin(), got.end(), [&](float v) { return v == p * p; }));
  // A request dropped unwaited still delivers its result (its destructor waits).
  { auto dropped = c.all_reduce_async(x.span()); }
  c.synchronize();
  const auto after = to_host(x, compute.get());
  CHECK(std::all_of(after.begin(), after.end(), [&](float v) { return v == p * p * p; }));
}

TEST_CASE(
    "a reduction of a buffer a gather still writes sums the gathered values; two sends of one buffer go together") {
  strata::select_device(env().local_rank());
  strata::cuda_stream compute;
  const int p = env().size();
  for (const bool staged : {true, false}) {
    INFO((staged ? "staged through pinned memory" : "as this MPI allows (CUDA-aware where it says so)"));
    if (staged) ::setenv("STRATA_MPI_CUDA_AWARE", "0", 1);
    strata::mpi_device_comm c(mpi_world(), {.compute_stream = compute.get()});
    ::unsetenv("STRATA_MPI_CUDA_AWARE");
    INFO("CUDA-aware: " << c.cuda_aware());
    // Each rank's block is rank + 1, out of place (CUDA-aware MPI writes y itself, the
    // staged form copies into it when waited); the sum over p ranks is p (r + 1).
    const std::size_t m = 1000;
    auto mine = to_device(std::vector<float>(m, static_cast<float>(env().rank() + 1)));
    strata::cuda_buffer<float> y(m * static_cast<std::size_t>(p));
    auto gathered = c.all_gather_async(std::span<const float>(mine.span()), y.span());
    c.all_reduce(y.span());
    gathered.wait();
    const auto got = to_host(y, compute.get());
    for (int r = 0; r < p; ++r) {
      INFO("block " << r);
      const auto b = got.begin() + static_cast<std::ptrdiff_t>(m) * r;
      CHECK(std::all_of(b, b + static_cast<std::ptrdiff_t>(m),
                        [&](float v) { return v == static_cast<float>(p * (r + 1)); }));
    }
    // Two sends of one buffer in flight together (reads do not wait for each other), past
    // MPI's eager size: were the second to wait for the first, each rank would wait in its
    // second send for a receive its peer posts only after its own.
    const std::size_t big = std::size_t{1} << 20;
    const int me = env().rank();
    auto x = to_device(std::vector<float>(big, static_cast<float>(me)));
    strata::cuda_buffer<float> from1(big), from2(big);
    auto s1 = c.send_async(std::span<const float>(x.span()), (me + 1) % p, 11);
    auto s2 = c.send_async(std::span<const float>(x.span()), (me + 2) % p, 12);
    c.recv(from1.span(), (me + p - 1) % p, 11);
    c.recv(from2.span(), (me + 2 * p - 2) % p, 12);
    s1.wait();
    s2.wait();
    const auto a1 = to_host(from1, compute.get()), a2 = to_host(from2, compute.get());
    CHECK(std::all_of(a1.begin(), a1.end(), [&](float v) { return v == static_cast<float>((me + p - 1) % p); }));
    CHECK(std::all_of(a2.begin(), a2.end(), [&](float v) { return v == static_cast<float>((me + 2 * p - 2) % p); }));
  }
}

TEST_CASE("device_comm holds an mpi_device_comm when STRATA_DEVICE_COMM=mpi; bad buffers are comm_errors") {
  strata::select_device(env().local_rank());
  strata::cuda_stream compute;
  ::setenv("STRATA_DEVICE_COMM", "mpi", 1);
  auto d = strata::device_comm::over(env().world(), strata::device_comm_from_env(), compute.get(), "data");
  ::unsetenv("STRATA_DEVICE_COMM");
  CHECK(d.kind() == strata::device_comm_kind::mpi);
  CHECK(d.size() == env().size());
  CHECK(d.name() == "data");
  auto x = to_device(std::vector<float>(64, 2.0f));
  d.all_reduce(x.span(), strata::reduce_op::avg);
  const auto got = to_host(x, compute.get());
  CHECK(std::all_of(got.begin(), got.end(), [](float v) { return v == 2.0f; }));
  std::vector<float> host(64);
  CHECK(has(comm_error_of([&] { d.all_reduce(std::span<float>(host)); }), "all_reduce on data: the buffer at"));
  CHECK(has(comm_error_of([&] { d.all_reduce(std::span<float>(host)); }), "is not device memory"));
  const std::size_t wrong = 10 * static_cast<std::size_t>(env().size()) + 1;
  strata::cuda_buffer<float> a(10), b(wrong);
  CHECK(has(comm_error_of([&] { d.all_gather(std::span<const float>(a.span()), b.span()); }),
            "all_gather on data: output has " + std::to_string(wrong) + " elements"));
  CHECK(has(comm_error_of([&] { d.broadcast(a.span(), env().size()); }), "not a rank of a communicator"));
  d.synchronize();
}
