// The CUDA spaces on a GPU: device and pinned buffers (zero-filled, counted, copied both
// ways, and through the hang-free transfers), streams and events (ordering, timing),
// device choice, and errors with file and line.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <strata/space/cuda.hpp>
#include <strata/space/cuda_transfer.hpp>
#include <string>
#include <vector>

#include "catch.hpp"

namespace {
bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("a device buffer is zero-filled, counted and round-trips through the host") {
  auto& c = strata::cuda::counters();
  const auto live = c.live.load(), allocations = c.allocations.load();
  {
    strata::cuda_buffer<float> d(1000);
    CHECK(c.live.load() == live + 4000);
    CHECK(c.allocations.load() == allocations + 1);
    CHECK(reinterpret_cast<std::uintptr_t>(d.data()) % strata::cuda::alignment == 0);
    std::vector<float> h(1000, -1.0f);
    strata::cuda::copy(h.data(), d.data(), d.bytes());
    CHECK(std::all_of(h.begin(), h.end(), [](float x) { return x == 0.0f; }));
    std::iota(h.begin(), h.end(), 1.0f);
    strata::cuda::copy(d.data(), h.data(), d.bytes());
    std::vector<float> back(1000);
    strata::cuda::copy(back.data(), d.data(), d.bytes());
    CHECK(back == h);
  }
  CHECK(c.live.load() == live);
}

TEST_CASE("pinned buffers are host-readable, zero-filled and counted apart from device memory") {
  const auto device_live = strata::cuda::counters().live.load();
  const auto live = strata::pinned::counters().live.load();
  strata::pinned_buffer<double> p(64);
  CHECK(strata::pinned::counters().live.load() == live + 64 * sizeof(double));
  CHECK(strata::cuda::counters().live.load() == device_live);
  for (double x : p) CHECK(x == 0.0);
  p[3] = 2.5;
  strata::cuda_buffer<double> d(64);
  strata::copy(d, p);
  strata::host_buffer<double> h(64);
  strata::copy(h, d);
  CHECK(h[3] == 2.5);
}

TEST_CASE("copies between mismatched buffers are refused") {
  strata::cuda_buffer<float> a(4), b(5);
  CHECK_THROWS_AS(strata::copy(a, b), strata::error);
}

TEST_CASE("streams and events order asynchronous work") {
  const std::size_t n = std::size_t{1} << 24;  // 64 MiB: long enough to still be running when queried
  strata::pinned_buffer<float> src(n), dst(n);
  for (std::size_t i = 0; i < n; i += 4097) src[i] = static_cast<float>(i);
  strata::cuda_buffer<float> d(n);
  strata::cuda_stream s;
  strata::cuda_event start(strata::cuda_event::timing::on), stop(strata::cuda_event::timing::on);
  start.record(s);
  strata::cuda::copy_async(d.data(), src.data(), d.bytes(), s.get());
  stop.record(s);
  // A second stream that waits for the event sees the whole copy.
  strata::cuda_stream t;
  t.wait(stop);
  strata::cuda::copy_async(dst.data(), d.data(), d.bytes(), t.get());
  t.synchronize();
  CHECK(stop.done());
  CHECK(s.done());
  for (std::size_t i = 0; i < n; i += 4097) REQUIRE(dst[i] == static_cast<float>(i));
  const float ms = elapsed_ms(start, stop);
  CHECK(ms > 0.0f);
  CHECK(ms < 10000.0f);
  // Moving keeps the handle alive and leaves the source empty.
  strata::cuda_stream moved = std::move(s);
  CHECK(moved.get() != nullptr);
  CHECK(s.get() == nullptr);
}

TEST_CASE("the device of a local rank") {
  const int n = strata::cuda_device_count();
  REQUIRE(n > 0);
  CHECK(strata::device_for_local_rank(0) == 0);
  if (n == 1) {
    CHECK(strata::device_for_local_rank(5) == 0);  // one visible device per process
  } else {
    CHECK(strata::device_for_local_rank(n - 1) == n - 1);
    CHECK_THROWS_AS(strata::device_for_local_rank(n), strata::cuda_error);
  }
  CHECK(strata::select_device(0) == 0);
  CHECK(strata::current_device() == 0);
  CHECK_THROWS_AS(strata::device_for_local_rank(-1), strata::config_error);
  {
    strata::device_guard g(n - 1);
    CHECK(strata::current_device() == n - 1);
  }
  CHECK(strata::current_device() == 0);
}

TEST_CASE("errors carry the call, CUDA's text, and the file and line") {
  std::string msg;
  try {
    STRATA_CHECK_CUDA(cudaSetDevice(4096));
  } catch (const strata::cuda_error& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(has(msg, "cudaSetDevice(4096) failed: cudaErrorInvalidDevice"));
  CHECK(has(msg, "space.cpp:"));
  // The failure does not linger for the next check.
  CHECK_NOTHROW(STRATA_CHECK_CUDA(cudaGetLastError()));

  std::string oom;
  try {
    strata::cuda_buffer<char> huge(std::size_t{1} << 50);  // a petabyte
  } catch (const strata::cuda_error& e) {
    oom = e.what();
  }
  CHECK(has(oom, "cudaMalloc of 1125899906842624 bytes failed: cudaErrorMemoryAllocation"));
}

TEST_CASE("download and upload land the bytes, pageable or pinned, across staging chunks") {
  strata::cuda_stream s;
  // One byte past a staging chunk: the pageable path copies in two chunks.
  const std::size_t bytes = strata::detail::staging_chunk + 1;
  std::vector<std::uint8_t> pageable(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pageable[i] = static_cast<std::uint8_t>(i * 131 + 7);
  strata::cuda_buffer<std::uint8_t> d(bytes);
  CHECK_FALSE(strata::detail::is_pinned(pageable.data()));
  strata::upload(s.get(), d.data(), pageable.data(), bytes);
  std::vector<std::uint8_t> back(bytes);
  strata::download(s.get(), back.data(), d.data(), bytes);
  CHECK(back == pageable);

  strata::pinned_buffer<std::uint8_t> pinned(bytes);
  CHECK(strata::detail::is_pinned(pinned.data()));
  strata::download(s.get(), pinned.data(), d.data(), bytes);
  CHECK(std::equal(pinned.begin(), pinned.end(), pageable.begin()));
  for (auto& x : pinned) x = static_cast<std::uint8_t>(~x);
  strata::upload(s.get(), d.data(), pinned.data(), bytes);
  strata::download(s.get(), back.data(), d.data(), bytes);
  CHECK(std::equal(pinned.begin(), pinned.end(), back.begin()));
}
