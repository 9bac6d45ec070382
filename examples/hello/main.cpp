#include <strata/strata.hpp>

#include <cstdio>
#include <string_view>
#include <vector>

struct block {  // a layer: params + forward/backward
  strata::nn::linear fc;
  strata::nn::relu act;
  template <class Space, class Act = float>
  struct cache {  // per space and activation type (16 bits in a mixed GPU trainer)
    strata::nn::linear::cache<Space, Act> fc;
    strata::nn::relu::cache<Space, Act> act;
    strata::tensor<Act, Space> h, dh;
  };
  template <class Ctx>
  void forward(Ctx& c, const strata::tensor_for<Ctx>& x, strata::tensor_for<Ctx>& y,
               cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& k) const {
    fc.forward(c, x, k.h, k.fc);
    act.forward(c, k.h, y, k.act);
  }
  template <class Ctx>
  void backward(Ctx& c, const strata::tensor_for<Ctx>& dy, strata::tensor_for<Ctx>& dx,
                cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& k) {
    act.backward(c, dy, k.dh, k.act);
    fc.backward(c, k.dh, dx, k.fc);
  }
};
struct model {  // fields in order are the layers
  std::vector<block> blocks;
  strata::nn::linear head;
  strata::nn::softmax_cross_entropy loss;  // the last layer is the loss
};

model make_model() {  // 8 features -> 2 blocks of 32 -> 4 classes
  model m;
  m.blocks.push_back({strata::nn::make_linear(8, 32), {}});
  m.blocks.push_back({strata::nn::make_linear(32, 32), {}});
  m.head = strata::nn::make_linear(32, 4);
  return m;
}

// This rank's rows of global batch `step` (64 rows): random features, and the class is
// which of the first four is largest. Row i is the same whatever the number of ranks.
strata::batch<> make_batch(long step, const strata::grid<strata::world_comm>& grid) {
  const int rows = 64 / grid.dp_size();
  const strata::random_stream features(1, "features");
  strata::batch<> b;
  b.inputs.resize({rows, 8});
  b.targets.resize({rows});
  for (int r = 0; r < rows; ++r) {
    const long row = step * 64 + grid.dp_rank() * rows + r;
    for (int f = 0; f < 8; ++f) b.inputs[r * 8 + f] = static_cast<float>(features.normal(row * 8 + f));
    int best = 0;
    for (int f = 1; f < 4; ++f) best = b.inputs[r * 8 + f] > b.inputs[r * 8 + best] ? f : best;
    b.targets[r] = static_cast<float>(best);
  }
  return b;
}

int main(int argc, char** argv) {
  if (argc > 1) {  // hello takes no options
    const bool help = std::string_view(argv[1]) == "--help";
    if (!help) std::fprintf(stderr, "hello: unknown option '%s'\n", argv[1]);
    std::printf("usage: hello   (trains a small MLP for 100 steps; mpiexec -n N hello for N processes)\n");
    return help ? 0 : 2;
  }
  strata::environment env(argc, argv);  // MPI (or a single process)
  strata::grid grid(env.world());       // data parallel over every process
  strata::trainer_options opts;         // lr schedule, micro-batches, clipping, ...
  opts.schedule = strata::lr_schedule::constant(1e-2);
  strata::trainer<model, strata::host, strata::zero<3>, strata::adamw, strata::mixed<strata::bf16>> tr(
      grid, make_model(), opts);
  for (long step = 0; step < 100; ++step) {
    auto stats = tr.step(make_batch(step, grid));  // loss, grad norm, lr, loss scale, skipped, samples/s
    if (env.world().rank() == 0 && stats.step % 20 == 0) std::printf("step %3ld  loss %.4f\n", stats.step, stats.loss);
  }
}
