// The version header and the CMake package agree (CMakeLists.txt reads the header).
#include <cstring>
#include <string>

#include <strata/strata.hpp>
#include "catch.hpp"

TEST_CASE("STRATA_VERSION_* match the CMake project's version and each other", "[version]") {
  REQUIRE(std::string(STRATA_VERSION_STRING) == STRATA_PROJECT_VERSION);
  REQUIRE(std::string(STRATA_VERSION_STRING) == std::to_string(STRATA_VERSION_MAJOR) + "." +
                                                    std::to_string(STRATA_VERSION_MINOR) + "." +
                                                    std::to_string(STRATA_VERSION_PATCH));
  REQUIRE(STRATA_VERSION == STRATA_VERSION_MAJOR * 10000 + STRATA_VERSION_MINOR * 100 + STRATA_VERSION_PATCH);
}
