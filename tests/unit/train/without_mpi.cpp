// The library as it builds without MPI (STRATA_HAS_MPI=0: no MPI compiler, as on a GPU
// machine with CUDA and NCCL alone): a single process's trainer over self_comm, whose
// collectives complete when called. Every ZeRO stage, with and without offload, must
// give the replicated trainer's weights, as it does over MPI (tests/mpi/trainer_stages).
// The macro is set here, before any strata header, so this one program is a no-MPI
// build within CI's MPI build; its main (tests/support/catch_main.cpp) has no strata code.
#undef STRATA_HAS_MPI
#define STRATA_HAS_MPI 0
#include <type_traits>

#include "catch.hpp"
#include "mlp_run.hpp"

using namespace strata;

static_assert(std::is_same_v<world_comm, self_comm>, "this test must build the library without MPI");

namespace {
template <class Precision>
void check_all_stages_equal() {
  grid g(environment().world());
  REQUIRE(g.world().size() == 1);
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  const auto ref = test::run_mlp<replicated, adamw, Precision>(g, s);
  CHECK(test::run_mlp<zero<1>, adamw, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<2>, adamw, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<3>, adamw, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<3, offload_optimizer>, adamw, Precision>(g, s).hash == ref.hash);
  // The runs trained: the weights moved away from their initial values.
  test::mlp_setup zero_steps = s;
  zero_steps.steps = 0;
  CHECK(test::run_mlp<replicated, adamw, Precision>(g, zero_steps).hash != ref.hash);
}
}  // namespace

TEST_CASE("without MPI, every ZeRO stage trains and gives identical weights (fp32)", "[train][self_comm]") {
  check_all_stages_equal<fp32>();
}
TEST_CASE("without MPI, every ZeRO stage trains and gives identical weights (bf16)", "[train][self_comm]") {
  check_all_stages_equal<mixed<bf16>>();
}
