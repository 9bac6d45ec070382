// The library as it builds without MPI (STRATA_HAS_MPI=0: no MPI compiler, as on a GPU
// machine with CUDA and NCCL alone): a single process's trainer over a self_comm world, whose
// collectives complete when called. Every step must have a gradient and training must
// lower the loss, and every ZeRO stage, with and without offload, must give the
// replicated trainer's weights, as over MPI (tests/mpi/trainer_stages).
// The macro is set here, before any strata header, so this one program is a no-MPI
// build within CI's MPI build; its main (tests/support/catch_main.cpp) has no strata code.
#undef STRATA_HAS_MPI
#define STRATA_HAS_MPI 0
#include <type_traits>
#include <variant>

#include "catch.hpp"
#include "mlp_run.hpp"

using namespace strata;

// The world may be one process or a Gloo job, never MPI's.
static_assert(std::variant_size_v<world_comm::impl_type> == 1 + STRATA_HAS_GLOO,
              "this test must build the library without MPI");

namespace {
// Every step had a gradient: self_comm's reduce-scatters complete when called, and a
// reducer that waited only on pending requests never added them (all zero, weights moved
// by weight decay alone, every stage "equal").
void check_gradients_arrived(const test::mlp_result& r) {
  for (const auto& st : r.stats) {
    INFO("step " << st.step);
    CHECK(st.grad_norm > 0.0);
  }
}

template <class Precision>
void check_all_stages_equal() {
  // One process, or (tests/CMakeLists.txt's gloo.train_without_mpi) two launched with
  // torchrun's variables: a build without MPI forms that world over Gloo.
  environment env;  // held: the world lives as long as an environment does
  grid g(env.world());
  REQUIRE(g.world().backend() == (g.world().size() == 1 ? "self" : "gloo"));
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  const auto ref = test::run_mlp<replicated, adamw, Precision>(g, s);
  check_gradients_arrived(ref);
  for (const auto& r : {test::run_mlp<zero<1>, adamw, Precision>(g, s), test::run_mlp<zero<2>, adamw, Precision>(g, s),
                        test::run_mlp<zero<3>, adamw, Precision>(g, s),
                        test::run_mlp<zero<3, offload_optimizer>, adamw, Precision>(g, s)}) {
    check_gradients_arrived(r);
    CHECK(r.hash == ref.hash);
  }
  // The runs trained: the weights moved away from their initial values.
  test::mlp_setup zero_steps = s;
  zero_steps.steps = 0;
  CHECK(test::run_mlp<replicated, adamw, Precision>(g, zero_steps).hash != ref.hash);
}
}  // namespace

TEST_CASE("without MPI, training on one batch lowers its loss at every ZeRO stage", "[train][self_comm]") {
  environment env;  // held: the world lives as long as an environment does
  grid g(env.world());
  test::mlp_setup s;
  const auto fit = [&]<class Sharding>(Sharding) {
    trainer<mlp::model, host, Sharding> tr(g, mlp::make_model(s.shape), s.opts);
    mlp::synthetic_data data(s.shape, s.seed);
    batch<> b;
    data.fill(0, s.global_batch, b);
    const float before = tr.evaluate(b);
    for (int k = 0; k < 10; ++k) tr.step(b);
    return std::pair{before, tr.evaluate(b)};
  };
  for (const auto& [before, after] : {fit(replicated{}), fit(zero<1>{}), fit(zero<2>{}), fit(zero<3>{})}) {
    INFO("loss " << before << " -> " << after);
    CHECK(after < 0.95f * before);  // 1.61 -> 1.44 here; without gradients it stays
  }
}

TEST_CASE("without MPI, every ZeRO stage trains and gives identical weights (fp32)", "[train][self_comm]") {
  check_all_stages_equal<fp32>();
}
TEST_CASE("without MPI, every ZeRO stage trains and gives identical weights (bf16)", "[train][self_comm]") {
  check_all_stages_equal<mixed<bf16>>();
}
