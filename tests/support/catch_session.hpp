// Runs Catch's session. Its implementation is compiled once, in catch_session.cpp (half a
// minute of compile time that each test main used to pay again), and every main calls it.
#pragma once

namespace strata_test {

int run_catch_session(int argc, char** argv);

}  // namespace strata_test
