// main() for single-process tests.
#include "catch_session.hpp"

int main(int argc, char** argv) { return strata_test::run_catch_session(argc, argv); }
