// buffer<T, Space>: allocates once and zero-fills at construction (the first touch),
// frees what it allocated exactly once, moves without copying, and offers element access
// only in spaces the host can read.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <type_traits>
#include <utility>

#include "catch.hpp"
#include "strata/core/buffer.hpp"
#include "strata/space/host.hpp"

using strata::buffer;
using strata::host;

namespace {

// A space the host cannot read (as device memory), which records what the buffer asks
// of it.
struct recording_space {
  static constexpr bool host_accessible = false;
  static inline std::size_t allocations = 0, allocated = 0, freed = 0, zeroed = 0;
  static inline void* last = nullptr;
  static void* allocate(std::size_t bytes) {
    ++allocations;
    allocated += bytes;
    return last = std::malloc(bytes);
  }
  static void deallocate(void* p, std::size_t bytes) {
    CHECK(p != nullptr);
    freed += bytes;
    std::free(p);
  }
  static void zero(void* p, std::size_t bytes) {
    zeroed += bytes;
    std::memset(p, 0, bytes);
  }
  static void reset() { allocations = allocated = freed = zeroed = 0; }
};

template <class B>
concept indexable = requires(B& b) { b[0]; };
template <class B>
concept iterable = requires(B& b) { b.begin(); };

}  // namespace

TEST_CASE("buffer: spaces are memory_space") {
  STATIC_REQUIRE(strata::memory_space<host>);
  STATIC_REQUIRE(strata::memory_space<recording_space>);
  STATIC_REQUIRE(!strata::memory_space<int>);
}

TEST_CASE("buffer: one allocation of n * sizeof(T) bytes, zero-filled, freed once") {
  recording_space::reset();
  {
    buffer<double, recording_space> b(10);
    CHECK(b.size() == 10);
    CHECK(b.bytes() == 80);
    CHECK_FALSE(b.empty());
    CHECK(b.data() == recording_space::last);
    CHECK(recording_space::allocations == 1);
    CHECK(recording_space::allocated == 80);
    CHECK(recording_space::zeroed == 80);
    CHECK(recording_space::freed == 0);
  }
  CHECK(recording_space::freed == 80);
  CHECK(recording_space::allocations == 1);
}

TEST_CASE("buffer: size 0 and default-constructed buffers allocate nothing") {
  recording_space::reset();
  {
    buffer<float, recording_space> a;
    buffer<float, recording_space> b(0);
    CHECK(a.empty());
    CHECK(b.empty());
    CHECK(a.data() == nullptr);
    CHECK(b.data() == nullptr);
    CHECK(b.bytes() == 0);
    CHECK(b.span().empty());
  }
  CHECK(recording_space::allocations == 0);
  CHECK(recording_space::freed == 0);
}

TEST_CASE("buffer: moves hand the memory over; the source is left empty") {
  STATIC_REQUIRE(!std::is_copy_constructible_v<buffer<float, host>>);
  STATIC_REQUIRE(!std::is_copy_assignable_v<buffer<float, host>>);
  STATIC_REQUIRE(std::is_nothrow_move_constructible_v<buffer<float, host>>);
  STATIC_REQUIRE(std::is_nothrow_move_assignable_v<buffer<float, host>>);
  recording_space::reset();
  {
    buffer<int, recording_space> a(4);
    int* p = a.data();
    buffer<int, recording_space> b(std::move(a));
    CHECK(b.data() == p);
    CHECK(b.size() == 4);
    CHECK(a.data() == nullptr);
    CHECK(a.size() == 0);
    CHECK(recording_space::allocations == 1);

    // Move-assignment frees what the target held, and takes the source's memory.
    buffer<int, recording_space> c(6);
    c = std::move(b);
    CHECK(recording_space::freed == 6 * sizeof(int));
    CHECK(c.data() == p);
    CHECK(c.size() == 4);
    CHECK(b.empty());
    // Assigning a buffer to itself keeps it.
    auto& same = c;
    c = std::move(same);
    CHECK(c.data() == p);
    CHECK(c.size() == 4);
    CHECK(recording_space::freed == 6 * sizeof(int));
  }
  CHECK(recording_space::allocations == 2);
  CHECK(recording_space::freed == recording_space::allocated);
}

TEST_CASE("buffer: element access only where the host can read") {
  STATIC_REQUIRE(indexable<buffer<float, host>>);
  STATIC_REQUIRE(iterable<buffer<float, host>>);
  STATIC_REQUIRE(indexable<const buffer<float, host>>);
  STATIC_REQUIRE(!indexable<buffer<float, recording_space>>);
  STATIC_REQUIRE(!iterable<buffer<float, recording_space>>);
}

TEST_CASE("buffer<T, host>: aligned, zeroed, readable and writable, counted") {
  const std::size_t before = host::counters().live.load();
  {
    buffer<float, host> b(1000);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data()) % host::alignment == 0);
    CHECK(host::counters().live.load() == before + 1000 * sizeof(float));
    CHECK(std::accumulate(b.begin(), b.end(), 0.0f) == 0.0f);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i);
    CHECK(b.data()[999] == 999.0f);
    CHECK(b.span().size() == 1000);
    CHECK(b.span()[10] == 10.0f);
    const buffer<float, host>& cb = b;
    CHECK(cb[5] == 5.0f);
    CHECK(cb.span().data() == b.data());
    CHECK(std::accumulate(cb.begin(), cb.end(), 0.0) == 999.0 * 1000.0 / 2.0);
  }
  CHECK(host::counters().live.load() == before);
}
