// nccl_comm on one GPU (a communicator of size 1), made by both bootstraps: over the host
// communicator (MPI, or self without MPI) and over the TCP rendezvous of MASTER_ADDR etc.
// Every collective of size 1 must leave the data as a one-process job defines it.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <strata/comm/detail/rendezvous.hpp>
#include <strata/comm/environment.hpp>
#include <strata/comm/nccl.hpp>
#include <strata/comm/self.hpp>
#include <strata/space/cuda.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"
#include "error_text.hpp"
#include "support/device_data.hpp"

namespace {

using test::to_device;
using test::to_host;

using test::random_floats;

template <class F>
std::string comm_error_of(F&& f) {
  return strata_test::error_text_of<strata::comm_error>(f);
}
using strata_test::has_text;
bool has(const std::string& s, const std::string& part) { return has_text(s, part); }

// One MPI session for the whole program: MPI cannot start again once finalized.
strata::environment& env() {
  static strata::environment e;
  return e;
}

// Every collective of a size-1 communicator, checked against its one-process meaning.
// `compute` becomes c's compute stream: the caller's, so that it outlives every later use
// of c (a moved communicator still records events on it).
void check_collectives(strata::nccl_comm& c, strata::cuda_stream& compute) {
  REQUIRE(c.size() == 1);
  REQUIRE(c.rank() == 0);
  c.set_compute_stream(compute.get());
  const std::size_t n = 100'003;
  const auto input = random_floats(n, 11);

  auto x = to_device(input);
  for (auto op : {strata::reduce_op::sum, strata::reduce_op::max, strata::reduce_op::min, strata::reduce_op::avg}) {
    c.all_reduce(x.span(), op);
    CHECK(to_host(x, compute.get()) == input);
  }
  c.broadcast(x.span(), 0);
  CHECK(to_host(x, compute.get()) == input);

  strata::cuda_buffer<float> y(n);
  c.reduce_scatter(std::span<const float>(x.span()), y.span());
  CHECK(to_host(y, compute.get()) == input);
  strata::cuda_buffer<float> z(n);
  c.all_gather(std::span<const float>(y.span()), z.span());
  CHECK(to_host(z, compute.get()) == input);
  c.all_gather(std::span<const float>(z.span()), z.span());  // in place: block 0 is the input
  CHECK(to_host(z, compute.get()) == input);
  // From pinned host memory (ZeRO-3's offloaded params): copied up on the way.
  strata::pinned_buffer<float> pinned_in(n);
  std::copy(input.begin(), input.end(), pinned_in.data());
  strata::cuda_buffer<float> g(n);
  c.all_gather_from_host_async(std::span<const float>(pinned_in.data(), n), g.span()).wait();
  CHECK(to_host(g, compute.get()) == input);

  strata::cuda_buffer<float> w(n);
  c.send_recv(std::span<const float>(x.span()), 0, w.span(), 0);
  CHECK(to_host(w, compute.get()) == input);

  // Other element types: integers and 16-bit floats pass through NCCL's own types.
  std::vector<std::int64_t> ints(1000);
  std::iota(ints.begin(), ints.end(), -500);
  auto di = to_device(ints);
  c.all_reduce(di.span(), strata::reduce_op::avg);
  CHECK(to_host(di, compute.get()) == ints);
  std::vector<strata::bf16> halves;
  for (float f : random_floats(1000, 3)) halves.push_back(strata::bf16(f));
  auto dh = to_device(halves);
  c.all_reduce(dh.span());
  CHECK(to_host(dh, compute.get()) == halves);

  // Asynchronous forms: the request completes, and the compute stream is ordered after it.
  auto r = c.all_reduce_async(x.span());
  r.wait();
  CHECK_FALSE(r.pending());
  auto b = c.barrier_async();
  c.synchronize();
  CHECK(b.test());
  c.barrier();
  CHECK(to_host(x, compute.get()) == input);

  // A split of one rank is again a communicator of size 1.
  auto sub = c.split(0, 0);
  CHECK(sub.size() == 1);
  CHECK(sub.name() == c.name() + "/0");
  sub.all_reduce(x.span());
  sub.synchronize();
  CHECK(to_host(x, compute.get()) == input);
}

}  // namespace

TEST_CASE("bootstrap over the host communicator (MPI broadcast of the ncclUniqueId)") {
  strata::select_device(env().local_rank());
  strata::cuda_stream compute;  // declared first: destroyed after the communicator
  strata::nccl_comm c(env().world(), {.name = "world_nccl"});
  CHECK(c.name() == "world_nccl");
  CHECK(c.device() == strata::current_device());
  check_collectives(c, compute);
}

TEST_CASE("bootstrap without MPI (TCP rendezvous from MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE)") {
  const int port = strata::detail::rendezvous_server(0, "127.0.0.1").port();
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  ::setenv("RANK", "0", 1);
  ::setenv("WORLD_SIZE", "1", 1);
  ::setenv("LOCAL_RANK", "0", 1);
  strata::cuda_stream compute;  // declared first: destroyed after both communicators
  auto c = strata::nccl_comm::from_env();
  CHECK(c.device() == 0);
  check_collectives(c, compute);
  // Moving keeps the communicator working.
  strata::nccl_comm moved = std::move(c);
  strata::cuda_buffer<float> x(16);
  moved.all_reduce(x.span());
  moved.synchronize();
}

TEST_CASE("bad arguments are comm_errors that name the operation") {
  strata::nccl_comm c(env().world());
  strata::cuda_buffer<float> a(10), b(20);
  CHECK(has(comm_error_of([&] { c.reduce_scatter(std::span<const float>(a.span()), b.span()); }),
            "reduce_scatter on nccl: input has 10 elements, expected out (20) x size (1) = 20"));
  CHECK(has(comm_error_of([&] { c.all_gather(std::span<const float>(a.span()), b.span()); }),
            "all_gather on nccl: output has 20 elements, expected in (10) x size (1) = 10"));
  CHECK(has(comm_error_of([&] { c.broadcast(a.span(), 1); }), "broadcast root 1 on nccl: not a rank"));
  CHECK(has(comm_error_of([&] { c.send(std::span<const float>(a.span()), 0); }), "use send_recv"));
  CHECK(has(comm_error_of([&] { c.split(-1, 0); }), "color -1 must be >= 0"));
  std::vector<float> host(10);
  CHECK(has(comm_error_of([&] { c.all_reduce(std::span<float>(host)); }), "is not device memory"));
  CHECK(has(comm_error_of([&] { c.all_gather_from_host_async(std::span<const float>(host), a.span()); }),
            "all_gather_from_host on nccl: the buffer at"));
  CHECK(has(comm_error_of([&] { c.all_gather_from_host_async(std::span<const float>(host), a.span()); }),
            "is not pinned host memory"));
}

// The second of two gathered device records made to name another GPU: the first
// character of its PCI bus id changed. (Its last byte is the text's NUL padding, which
// the key does not read: a flip there left the same GPU, and the first GPU run failed.)
void make_other_gpu(std::span<std::uint8_t> two_records) {
  two_records[two_records.size() / 2 + strata::detail::rendezvous_wire::node_bytes] ^= 1;
}

// Two ranks: a host communicator of 2 whose all_gather hands back this rank's record
// twice, as two processes on the same device would see it, or (other_gpu) with the
// second record naming another device, as a process there would.
struct two_ranks {
  bool other_gpu = false;
  int rank() const { return 0; }
  int size() const { return 2; }
  void all_gather(std::span<const std::uint8_t> in, std::span<std::uint8_t> out) {
    std::copy(in.begin(), in.end(), out.begin());
    std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(in.size()));
    if (other_gpu) make_other_gpu(out);
  }
};

TEST_CASE("two ranks on one GPU are a config_error naming both, before NCCL's init") {
  two_ranks same;
  std::string what;
  try {
    strata::detail::check_one_process_per_gpu(same, strata::current_device(), "world_nccl");
  } catch (const strata::config_error& e) {
    what = e.what();
  }
  CHECK(has(what, "nccl communicator world_nccl: ranks 0 and 1 both use the GPU at PCI "));
  CHECK(has(what, "Start at most one process per GPU"));
  two_ranks apart{.other_gpu = true};
  CHECK_NOTHROW(strata::detail::check_one_process_per_gpu(apart, strata::current_device(), "world_nccl"));
}

// Rank 0 of a two-rank world whose other rank never comes: its host side (the GPU check's
// all_gather, the id's broadcast) answers as if it had, and NCCL's init then waits for a
// rank that is not there, as after a peer that failed before its init.
struct deserted_rank : strata::self_comm {
  deserted_rank() : strata::self_comm("deserted") {}
  int size() const { return 2; }
  template <class U, class T>
  void all_gather(std::span<U> in, std::span<T> out) {
    std::copy(in.begin(), in.end(), out.begin());
    std::copy(in.begin(), in.end(), out.begin() + static_cast<std::ptrdiff_t>(in.size()));
    if constexpr (std::is_same_v<T, std::uint8_t>) make_other_gpu(out);  // the other rank's GPU
  }
  deserted_rank split(int, int) { return deserted_rank(); }
};

TEST_CASE("a rank that never reaches the init is a comm_error after the time-out, not a hang") {
  if (strata::detail::nccl_blocking()) {
    WARN(
        "STRATA_NCCL_BLOCKING=1 or NCCL_COMM_BLOCKING=1: a blocking init has no time-out, so this case would wait "
        "for ever");
    return;
  }
  deserted_rank host;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string what = comm_error_of(
      [&] { strata::nccl_comm c(host, {.name = "deserted", .timeout = std::chrono::duration<double>(3.0)}); });
  const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - t0;
  INFO(what);
  CHECK(has(what, "nccl communicator deserted: ncclCommInitRank (rank 0 of 2, device "));
  CHECK(has(what, "did not finish within 3 s"));
  CHECK(waited.count() >= 2.9);
  CHECK(waited.count() < 60.0);
  // The process is still usable: a communicator of this rank alone works afterwards.
  strata::cuda_stream compute;
  strata::nccl_comm alone(env().world(), {.name = "after_deserted"});
  strata::cuda_buffer<float> x(16);
  alone.set_compute_stream(compute.get());
  alone.all_reduce(x.span());
  alone.synchronize();
}
