// The MLP classifier of examples/mlp and its deterministic synthetic data set: hidden
// blocks (linear + relu) in a std::vector, a linear head, softmax cross-entropy.
#pragma once
#include <cstdint>
#include <vector>

#include <strata/core/random.hpp>
#include <strata/nn/all.hpp>
#include <strata/train/batch.hpp>

namespace mlp {

struct hidden_block {
  strata::nn::linear fc;
  strata::nn::relu act;

  // One cache per space and activation type, so the block runs wherever its layers run
  // (host or CUDA, float or 16-bit activations).
  template <class Space, class Act = float>
  struct cache {
    strata::nn::linear::cache<Space, Act> fc;
    strata::nn::relu::cache<Space, Act> act;
    strata::tensor<Act, Space> h, dh;  // the pre-activation and its gradient, owned here
  };
  template <class Ctx>
  void forward(Ctx& ctx, const strata::tensor_for<Ctx>& x, strata::tensor_for<Ctx>& y,
               cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) const {
    fc.forward(ctx, x, c.h, c.fc);
    act.forward(ctx, c.h, y, c.act);
  }
  template <class Ctx>
  void backward(Ctx& ctx, const strata::tensor_for<Ctx>& dy, strata::tensor_for<Ctx>& dx,
                cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) {
    act.backward(ctx, dy, c.dh, c.act);
    fc.backward(ctx, c.dh, dx, c.fc);
  }
};

struct model {
  std::vector<hidden_block> blocks;
  strata::nn::linear head;
  strata::nn::softmax_cross_entropy loss;
};

struct shape_config {
  int features = 32, hidden = 64, layers = 3, classes = 10;
};

inline model make_model(const shape_config& s) {
  model m;
  int in = s.features;
  for (int l = 0; l < s.layers; ++l) {
    m.blocks.push_back({strata::nn::make_linear(in, s.hidden), {}});
    in = s.hidden;
  }
  m.head = strata::nn::make_linear(in, s.classes);
  return m;
}

// Sample i of the stream: features are standard normal, the label is the argmax of a
// fixed random linear map of the features (so the task is learnable). Everything is a
// function of (seed, i): any rank can produce any rows, for any process layout.
class synthetic_data {
 public:
  synthetic_data(const shape_config& s, std::uint64_t seed) : s_(s), seed_(seed), teacher_(s.features * s.classes) {
    const strata::random_stream teacher(seed, "teacher");
    for (std::size_t i = 0; i < teacher_.size(); ++i) teacher_[i] = static_cast<float>(teacher.normal(i));
  }

  // Rows [first, first + count) of the stream into b (inputs [count, F], targets [count]).
  void fill(std::uint64_t first, std::int64_t count, strata::batch<>& b) const {
    b.inputs.resize({count, s_.features});
    b.targets.resize({count});
    const strata::random_stream features(seed_, "features");
    for (std::int64_t r = 0; r < count; ++r) {
      const std::uint64_t row = first + static_cast<std::uint64_t>(r);
      float* x = b.inputs.data() + r * s_.features;
      for (int f = 0; f < s_.features; ++f) x[f] = static_cast<float>(features.normal(row * s_.features + f));
      int best = 0;
      float best_v = -1e30f;
      for (int c = 0; c < s_.classes; ++c) {
        float v = 0;
        for (int f = 0; f < s_.features; ++f) v += teacher_[c * s_.features + f] * x[f];
        if (v > best_v) best_v = v, best = c;
      }
      b.targets[r] = static_cast<float>(best);
    }
  }

 private:
  shape_config s_;
  std::uint64_t seed_;
  std::vector<float> teacher_;
};

}  // namespace mlp
