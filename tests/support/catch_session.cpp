// Catch's implementation (Catch2 2's single header compiles it where CATCH_CONFIG_RUNNER
// is defined; Catch2 3 has it in its library) and the one call the test mains make.
#if STRATA_CATCH3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include "catch_session.hpp"

int strata_test::run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
