// Catch's implementation (Catch2 2's single header compiles it where CATCH_CONFIG_RUNNER
// is defined; Catch2 3 has it in its library) and the one call the test mains make.
#if STRATA_CATCH3
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include "catch_session.hpp"

int strata_test::run_catch_session(int argc, char** argv) {
  Catch::Session session;
  // Plain text: under mpiexec a rank's stdout can be a terminal, and escape codes would
  // end up in ctest's logs. Set here, not by a flag: the flag's name differs between
  // Catch2 2 (--use-colour no) and 3 (--colour-mode none), and each rejects the other's.
  // A flag given on the command line still overrides this default.
#if STRATA_CATCH3
  session.configData().defaultColourMode = Catch::ColourMode::None;
#else
  session.configData().useColour = Catch::UseColour::No;
#endif
  return session.run(argc, argv);
}
