// shape: up to four non-negative extents; numel is their product (1 for rank 0, 0 when
// an extent is 0), equality is rank and extents, str() is how messages print it, and a
// bad shape is a config_error that says what and where.
#include <cstdint>
#include <sstream>
#include <string>

#include "catch.hpp"
#include "strata/core/shape.hpp"

using strata::shape;

TEST_CASE("shape: rank, extents, numel") {
  const shape s{2, 3, 4};
  CHECK(s.rank == 3);
  CHECK(s[0] == 2);
  CHECK(s[1] == 3);
  CHECK(s[2] == 4);
  CHECK(s.numel() == 24);

  CHECK(shape{7}.numel() == 7);
  CHECK(shape{1, 2, 3, 4}.rank == 4);
  CHECK(shape{1, 2, 3, 4}.numel() == 24);
  // A zero extent is a valid, empty tensor (a linear without inputs, an empty batch).
  CHECK(shape{0}.numel() == 0);
  CHECK(shape{5, 0, 3}.numel() == 0);
  // Rank 0 is a scalar: one element.
  CHECK(shape{}.rank == 0);
  CHECK(shape{}.numel() == 1);
  CHECK(shape().numel() == 1);
  // Counts beyond 32 bits (a 2^20 x 2^20 embedding) do not wrap.
  CHECK(shape{std::int64_t{1} << 20, std::int64_t{1} << 20}.numel() == std::size_t{1} << 40);
}

TEST_CASE("shape: extents can be set through operator[]") {
  shape s{2, 3};
  s[1] = 5;
  CHECK(s[1] == 5);
  CHECK(s.numel() == 10);
  CHECK(s == shape{2, 5});
}

TEST_CASE("shape: equality is rank and extents") {
  CHECK(shape{2, 3} == shape{2, 3});
  CHECK_FALSE(shape{2, 3} == shape{3, 2});
  CHECK_FALSE(shape{2} == shape{2, 1});  // same numel, other rank
  CHECK_FALSE(shape{} == shape{1});
  CHECK(shape{} == shape());
  // Storage past the rank does not take part.
  shape a{4}, b{4};
  a.dims[2] = 9;
  CHECK(a == b);
}

TEST_CASE("shape: printed as [d0, d1, ...]") {
  CHECK(shape{2, 3, 4}.str() == "[2, 3, 4]");
  CHECK(shape{7}.str() == "[7]");
  CHECK(shape{}.str() == "[]");
  std::ostringstream os;
  os << shape{1, 0};
  CHECK(os.str() == "[1, 0]");
}

TEST_CASE("shape: usable in constant expressions") {
  constexpr shape s;
  STATIC_REQUIRE(s.rank == 0);
  STATIC_REQUIRE(s.numel() == 1);
  STATIC_REQUIRE(s == shape());
}

TEST_CASE("shape: more than 4 dimensions or a negative extent is a config_error naming it") {
  CHECK_THROWS_AS((shape{1, 2, 3, 4, 5}), strata::config_error);
  CHECK_THROWS_WITH((shape{1, 2, 3, 4, 5}),
                    strata_test::contains_text("shape of rank 5") && strata_test::contains_text("at most 4"));
  CHECK_THROWS_AS((shape{2, -1}), strata::config_error);
  CHECK_THROWS_WITH((shape{2, -3}), strata_test::contains_text("shape extent -3 is negative"));
  // The message says where the check is, relative to the include directory.
  CHECK_THROWS_WITH((shape{-1}), strata_test::contains_text("[strata/core/shape.hpp:"));
}
