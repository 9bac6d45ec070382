// Small nn-free layers and models for the model/ tests: params are declared directly,
// with shapes chosen so that no param or layer is a multiple of the alignments.
#pragma once
#include <array>
#include <string>
#include <vector>

#include <strata/model/param.hpp>
#include <strata/space/tensor.hpp>

namespace strata_test {

using strata::param;

struct linear {
  param<float> weight;
  param<float> bias;
};
inline linear make_linear(std::int64_t out, std::int64_t in) { return {param<float>({out, in}), param<float>({out})}; }

struct embedding {
  param<float> weight;
};

// Hyperparameters and non-param state sit next to params and are skipped by the walk.
struct norm {
  param<float> gamma;
  param<float> beta;
  float eps = 1e-5f;
  std::string kind = "layer";
};

struct attention {
  linear q, k, v;
};

struct block {
  attention attn;
  linear fc1, fc2;
  norm ln;
};

struct relu {};

struct model {
  embedding embed;
  std::vector<block> blocks;
  linear head;
};

// vocab 11, width 6, hidden 10.
inline block make_block() {
  const std::int64_t d = 6, h = 10;
  return {{make_linear(d, d), make_linear(d, d), make_linear(d, d)},
          make_linear(h, d),
          make_linear(d, h),
          {param<float>({d}), param<float>({d})}};
}
inline model make_model(std::size_t n_blocks = 3) {
  return {{param<float>({11, 6})}, std::vector<block>(n_blocks, make_block()), make_linear(11, 6)};
}

// Zero-param layers between layers with params.
struct mlp_with_activations {
  linear fc1;
  relu act;
  linear fc2;
  std::vector<relu> more_acts;
  linear out;
};

}  // namespace strata_test
