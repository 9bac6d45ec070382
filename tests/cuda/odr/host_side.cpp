// The g++ half of the ODR test, and the test itself: one program links a .cu and a .cpp
// translation unit that both include strata, and both must agree on every layout and
// share every singleton and inline function (no header defines anything per compiler).
#include <strata/comm/nccl.hpp>
#include <strata/optim/cuda_run_table.hpp>
#include <strata/space/cuda.hpp>
#include <strata/strata.hpp>

#include "catch.hpp"
#include "facts.hpp"

odr::facts odr::from_cxx_tu() {
  facts f;
  STRATA_ODR_FACTS(f);
  return f;
}

TEST_CASE("a .cu and a .cpp translation unit agree on strata's definitions") {
  const auto cu = odr::from_cuda_tu();
  const auto cxx = odr::from_cxx_tu();
  REQUIRE(cu.layout.size() == cxx.layout.size());
  for (std::size_t i = 0; i < cu.layout.size(); ++i) {
    INFO("layout fact " << i);
    CHECK(cu.layout[i] == cxx.layout[i]);
  }
  for (std::size_t i = 0; i < cu.singletons.size(); ++i) {
    INFO("singleton " << i);
    CHECK(cu.singletons[i] == cxx.singletons[i]);
  }
  for (std::size_t i = 0; i < cu.functions.size(); ++i) {
    INFO("function " << i);
    CHECK(cu.functions[i] == cxx.functions[i]);
  }
}

TEST_CASE("allocations counted in one translation unit are seen by the other") {
  // The byte counters are function-local statics of inline functions: one object per
  // program only if the linker merged both translation units' copies.
  const auto before = strata::host::counters().live.load();
  strata::host_buffer<float> b(1000);
  CHECK(strata::host::counters().live.load() == before + 4000);
  CHECK(odr::from_cuda_tu().singletons[0] == &strata::host::counters());
}
