// One include for Catch2 2 (Debian 12) or 3 (Debian 13, Ubuntu 24.04, vcpkg), chosen by
// the build, and the names that moved between them, so that a test spells each one way.
#pragma once
#include <string>
#if STRATA_CATCH3
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
#endif

#if STRATA_CATCH3
// Catch2 2 has Approx at global scope; Catch2 3 only as Catch::Approx.
using Catch::Approx;
#endif

namespace strata_test {

// A matcher for a string that holds `part` (Catch2 2's Catch::Contains, Catch2 3's
// Catch::Matchers::ContainsSubstring), for CHECK_THAT and CHECK_THROWS_WITH.
inline auto contains_text(const std::string& part) {
#if STRATA_CATCH3
  return Catch::Matchers::ContainsSubstring(part);
#else
  return Catch::Contains(part);
#endif
}

}  // namespace strata_test
