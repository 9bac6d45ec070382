// strata-ranks: 1 2 4
// strata-gloo-ranks: 4
// The promise of strata's sharding: at a fixed layout every ZeRO stage (with or without
// optimizer offload) produces bitwise identical weights, for fp32 and for bf16, and a run
// repeated gives the same hash.
#include "catch.hpp"
#include "mlp_run.hpp"

using namespace strata;

namespace {
template <class Optimizer, class Precision>
void check_all_stages_equal() {
  grid g(environment().world());
  test::mlp_setup s;
  s.opts.micro_batches = 2;
  const auto ref = test::run_mlp<replicated, Optimizer, Precision>(g, s);
  CHECK(test::run_mlp<zero<1>, Optimizer, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<2>, Optimizer, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<3>, Optimizer, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<1, offload_optimizer>, Optimizer, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<2, offload_optimizer>, Optimizer, Precision>(g, s).hash == ref.hash);
  CHECK(test::run_mlp<zero<3, offload_optimizer>, Optimizer, Precision>(g, s).hash == ref.hash);
  // The runs trained: the weights moved away from their initial values.
  test::mlp_setup zero_steps = s;
  zero_steps.steps = 0;
  CHECK(test::run_mlp<replicated, Optimizer, Precision>(g, zero_steps).hash != ref.hash);
}
}  // namespace

TEST_CASE("every ZeRO stage gives bitwise identical weights (fp32, AdamW)") { check_all_stages_equal<adamw, fp32>(); }
TEST_CASE("every ZeRO stage gives bitwise identical weights (bf16, AdamW)") {
  check_all_stages_equal<adamw, mixed<bf16>>();
}
TEST_CASE("every ZeRO stage gives bitwise identical weights (fp16, SGD)") {
  check_all_stages_equal<sgd, mixed<fp16>>();
}
TEST_CASE("every ZeRO stage gives bitwise identical weights (fp32, Lion)") { check_all_stages_equal<lion, fp32>(); }

TEST_CASE("two identical runs give the same weights hash") {
  grid g(environment().world());
  test::mlp_setup s;
  CHECK(test::run_mlp<zero<2>>(g, s).hash == test::run_mlp<zero<2>>(g, s).hash);
  CHECK(test::run_mlp<zero<3>, adamw, mixed<bf16>>(g, s).hash == test::run_mlp<zero<3>, adamw, mixed<bf16>>(g, s).hash);
}
