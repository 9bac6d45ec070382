// detail::function_ref: the callbacks of the trainer's weight walks and exports. It must
// call the callable it was given, not a copy (a walk's lambda accumulates into its
// captures), pass references through, and return what the callable returns.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "catch.hpp"
#include "strata/core/function_ref.hpp"

namespace {

using strata::detail::function_ref;

int call_twice(function_ref<int(int)> f) { return f(1) + f(2); }

}  // namespace

TEST_CASE("function_ref calls the callable it refers to, not a copy") {
  int calls = 0;
  auto counting = [&calls](int x) {
    ++calls;
    return 10 * x;
  };
  CHECK(call_twice(counting) == 30);
  CHECK(calls == 2);

  // A stateful callable: its own members change, as when passed by reference.
  struct accumulator {
    int sum = 0;
    int operator()(int x) { return sum += x; }
  } acc;
  CHECK(call_twice(acc) == 1 + 3);
  CHECK(acc.sum == 3);
}

TEST_CASE("function_ref passes references and spans through and returns the result") {
  std::vector<float> seen;
  std::size_t last_index = 0;
  const auto collect = [&](std::size_t i, std::span<const float> v) {
    last_index = i;
    seen.insert(seen.end(), v.begin(), v.end());
  };
  const function_ref<void(std::size_t, std::span<const float>)> f = collect;
  const float a[] = {1.5f, -2.0f}, b[] = {3.25f};
  f(4, a);
  f(7, b);
  CHECK(last_index == 7);
  CHECK(seen == std::vector<float>{1.5f, -2.0f, 3.25f});

  std::string out;
  const auto append = [](std::string& s, const std::string& t) -> std::string& { return s += t; };
  const function_ref<std::string&(std::string&, const std::string&)> g = append;
  CHECK(&g(out, "ab") == &out);
  g(out, "c");
  CHECK(out == "abc");

  // Copying a function_ref refers to the same callable (which outlives both).
  int squares = 0;
  const auto square = [&squares](int x) {
    ++squares;
    return x * x;
  };
  const function_ref<int(int)> h = square;
  const function_ref<int(int)> copy = h;
  CHECK(copy(9) == 81);
  CHECK(h(3) == 9);
  CHECK(squares == 2);
}
