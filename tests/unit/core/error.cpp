// strata's errors: one hierarchy under strata::error (a std::runtime_error), and
// expects(), whose message names the caller's file and line and is only built when the
// check fails.
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "catch.hpp"
#include "strata/core/error.hpp"
#include "strata/core/shape.hpp"

namespace {

// The message expects() threw, or "" when it did not throw.
template <class E = strata::error, class F>
std::string thrown(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_CASE("every strata error is a strata::error and a std::runtime_error") {
  STATIC_REQUIRE(std::is_base_of_v<std::runtime_error, strata::error>);
  STATIC_REQUIRE(std::is_base_of_v<strata::error, strata::config_error>);
  STATIC_REQUIRE(std::is_base_of_v<strata::error, strata::comm_error>);
  STATIC_REQUIRE(std::is_base_of_v<strata::error, strata::cuda_error>);
  STATIC_REQUIRE(std::is_base_of_v<strata::error, strata::checkpoint_error>);
  // The kinds are distinct: a handler for one does not take another.
  STATIC_REQUIRE(!std::is_base_of_v<strata::config_error, strata::comm_error>);
  STATIC_REQUIRE(!std::is_base_of_v<strata::comm_error, strata::checkpoint_error>);
  CHECK(std::string(strata::checkpoint_error("bad file").what()) == "bad file");
}

TEST_CASE("expects: nothing happens when the condition holds") {
  CHECK_NOTHROW(strata::expects(true, "never"));
  CHECK_NOTHROW(strata::expects<strata::comm_error>(1 + 1 == 2, std::string("never")));
}

TEST_CASE("expects: throws the asked type, with the message and the caller's location") {
  const int line = __LINE__ + 1;  // the line of the call
  const std::string m = thrown([] { strata::expects(false, "grid 2x3 does not divide 4"); });
  CHECK(m.rfind("grid 2x3 does not divide 4 [", 0) == 0);
  CHECK(ends_with(m, "error.cpp:" + std::to_string(line) + "]"));

  CHECK_THROWS_AS(strata::expects<strata::config_error>(false, "x"), strata::config_error);
  CHECK_THROWS_AS(strata::expects<strata::comm_error>(false, "x"), strata::comm_error);
  CHECK_THROWS_AS(strata::expects<strata::checkpoint_error>(false, "x"), strata::checkpoint_error);
  // The default kind is strata::error itself, caught by a handler for any of them.
  CHECK_THROWS_AS(strata::expects(false, "x"), strata::error);
  CHECK(thrown<std::runtime_error>([] {
          strata::expects<strata::cuda_error>(false, "no device");
        }).rfind("no device [", 0) == 0);
  // A std::string message works too.
  CHECK(thrown([] { strata::expects(false, std::string("built ") + "early"); }).rfind("built early [", 0) == 0);
}

TEST_CASE("expects: a callable message is built only when the check fails") {
  int built = 0;
  auto message = [&] {
    ++built;
    return strata::cat("rank ", 5, " of ", 4);
  };
  strata::expects(true, message);
  strata::expects<strata::config_error>(true, message);
  CHECK(built == 0);
  const std::string m = thrown<strata::config_error>([&] { strata::expects<strata::config_error>(false, message); });
  CHECK(built == 1);
  CHECK(m.rfind("rank 5 of 4 [", 0) == 0);
  // A callable may return a C string.
  CHECK(thrown([] { strata::expects(false, [] { return "literal"; }); }).rfind("literal [", 0) == 0);
}

TEST_CASE("a check inside strata names its header relative to the include directory") {
  const std::string m = thrown<strata::config_error>([] { (void)strata::shape{-1}; });
  CHECK(m.find("[strata/core/shape.hpp:") != std::string::npos);
  CHECK(m.find("include/") == std::string::npos);
}

TEST_CASE("cat and errno_text") {
  CHECK(strata::cat("grid ", 2, "x", 4, ' ', 0.5) == "grid 2x4 0.5");
  CHECK(strata::cat(std::string("a"), std::size_t{7}) == "a7");
  CHECK(strata::detail::errno_text(ENOENT) == std::strerror(ENOENT));
  CHECK_FALSE(strata::detail::errno_text(ENOENT).empty());
}
