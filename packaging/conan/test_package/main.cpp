// The Conan package's consumer: a 2-process all_reduce and one data-parallel training
// step through the umbrella header. Exits non-zero unless the sum is right on every
// rank and the step changed the weights with a finite loss. With strata::mlflow (the
// mlflow=True package), a run against a port where no server listens must warn and be
// inactive: libcurl linked and called, training unaffected.
#include <cmath>
#include <cstdio>
#include <strata/strata.hpp>
#include <vector>
#if STRATA_HAS_MLFLOW
#include <strata/observe/mlflow.hpp>
#endif

struct model {
  strata::nn::linear fc;
  strata::nn::softmax_cross_entropy loss;
};

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  auto& world = env.world();
  std::vector<float> v(1000, static_cast<float>(world.rank() + 1));
  world.all_reduce(std::span<float>(v));
  const float expected = static_cast<float>(world.size() * (world.size() + 1) / 2);
  bool ok = true;
  for (float x : v) ok = ok && x == expected;

  strata::grid grid(world);
  strata::trainer<model, strata::host, strata::zero<1>, strata::adamw, strata::fp32> tr(
      grid, model{strata::nn::make_linear(4, 3), {}}, strata::trainer_options{});
  strata::batch<> b;  // 2 rows per rank: class r % 3 has the largest feature
  b.inputs.resize({2, 4});
  b.targets.resize({2});
  for (int r = 0; r < 2; ++r) {
    for (int f = 0; f < 4; ++f) b.inputs[r * 4 + f] = (f == (world.rank() * 2 + r) % 3) ? 1.0f : 0.0f;
    b.targets[r] = static_cast<float>((world.rank() * 2 + r) % 3);
  }
  const auto before = strata::weights_hash_of(tr);
  const auto stats = tr.step(b);
  const auto after = strata::weights_hash_of(tr);
  ok = ok && stats.step == 1 && std::isfinite(stats.loss) && before != after;
#if STRATA_HAS_MLFLOW
  if (world.rank() == 0) {
    const strata::mlflow_run run({.uri = "http://127.0.0.1:9", .timeout_s = 5});
    ok = ok && !run.active();
    std::printf("strata::mlflow: an unreachable server leaves the run %s\n", run.active() ? "ACTIVE" : "inactive");
  }
#endif
  std::printf("strata %s, rank %d of %d: all_reduce and a training step (loss %.4f) %s\n", STRATA_VERSION_STRING,
              world.rank(), world.size(), stats.loss, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
