// main() for single-process tests.
#if STRATA_CATCH3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
