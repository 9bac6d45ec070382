// The decoder-only transformer of examples/gpt (GPT-2's shape, pre-norm blocks, untied
// head) with its layers split over tensor-parallel ranks, and a deterministic synthetic
// token stream from a fixed random Markov chain for it to learn.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <strata/core/random.hpp>
#include <strata/core/trace.hpp>
#include <strata/model/concepts.hpp>
#include <strata/nn/attention.hpp>
#include <strata/nn/gelu.hpp>
#include <strata/nn/layer_norm.hpp>
#include <strata/nn/position_embedding.hpp>
#include <strata/nn/residual.hpp>
#include <strata/nn/tp/all.hpp>
#include <strata/space/call_scratch.hpp>
#include <strata/train/batch.hpp>
#include <vector>

namespace gpt {

struct config {
  int vocab = 64, seq = 16, dim = 32, heads = 4, layers = 2;
};

// The params that are lookups, not products (the token and position tables): no FLOPs.
inline double lookup_params(const config& c) { return static_cast<double>(c.vocab + c.seq) * c.dim; }

// ids [B, S] -> token embedding + position embedding [B, S, D]. The token table is split
// by vocabulary over the tensor ranks; the position table is replicated.
struct embedding_layer {
  strata::nn::vocab_parallel_embedding token;
  strata::nn::position_embedding position;

  // One cache per space and activation type, so the layer runs wherever its parts run
  // (host or CUDA, float or 16-bit activations). Token ids come in as floats.
  template <class Space, class Act = float>
  struct cache {
    strata::nn::vocab_parallel_embedding::cache<Space, Act> token;
    strata::nn::position_embedding::cache<Space, Act> position;
    strata::tensor<Act, Space> tok, dtok;
  };
  template <class Ctx>
  void forward(Ctx& ctx, const strata::float_tensor_for<Ctx>& ids, strata::tensor_for<Ctx>& y,
               cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) const {
    token.forward(ctx, ids, c.tok, c.token);
    position.forward(ctx, c.tok, y, c.position);
  }
  template <class Ctx>
  void backward(Ctx& ctx, const strata::tensor_for<Ctx>& dy, strata::float_tensor_for<Ctx>& dx,
                cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) {
    position.backward(ctx, dy, c.dtok, c.position);
    token.backward(ctx, c.dtok, dx, c.token);
  }
};

// x + attn(ln1(x)), then + fc2(gelu(fc1(ln2(.)))): each branch is column- then
// row-parallel, so a block costs one all-reduce per branch forward and one backward.
struct block {
  strata::nn::layer_norm ln1;
  strata::nn::causal_self_attention attn;
  strata::nn::layer_norm ln2;
  strata::nn::column_parallel_linear fc1;  // [4D/T, D]
  strata::nn::gelu act;
  strata::nn::row_parallel_linear fc2;  // [D, 4D/T]

  // Within one call (a trainer lends one set to every block; see strata::call_scratch):
  // the norms' outputs h1, h2 and GELU's g, which backward makes again from the kept
  // inputs (layer_norm::forward_again, gelu's forward: one pass each, the same bits; where
  // fc1's GEMM made g in its epilogue, cuBLASLt's GELU, the kernel's is within a rounding
  // of it), and the gradients.
  template <class Space, class Act = float>
  struct scratch {
    strata::tensor<Act, Space> h1, h2, g;
    strata::tensor<Act, Space> du, dh2, dx1, dh1;
  };
  template <class Space, class Act = float>
  struct cache {
    strata::nn::layer_norm::cache<Space, Act> ln1, ln2;
    strata::nn::causal_self_attention::cache<Space, Act> attn;
    strata::nn::column_parallel_linear::cache<Space, Act> fc1;
    strata::nn::gelu::cache<Space, Act> act;
    strata::nn::row_parallel_linear::cache<Space, Act> fc2;
    strata::tensor<Act, Space> x1, u;  // x + attention, and fc1's output (GELU's input)
    strata::call_scratch<scratch<Space, Act>> work;
  };
  template <class Ctx>
  void forward(Ctx& ctx, const strata::tensor_for<Ctx>& x, strata::tensor_for<Ctx>& y,
               cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) const {
    // attn's, fc1's and fc2's caches point at w.h1, w.h2 and w.g from here to backward,
    // which makes them again there (other blocks' calls use the scratch in between).
    auto& w = strata::scratch_of(ctx, c.work);
    {
      // Each branch its own trace scope, so a step's profile splits attention from the MLP.
      strata::trace_scope part(strata::trace_track::compute, "attn forward");
      ln1.forward(ctx, x, w.h1, c.ln1);
      attn.forward(ctx, w.h1, c.x1, c.attn);
      strata::nn::add_into(ctx, c.x1, x);
    }
    strata::trace_scope part(strata::trace_track::compute, "mlp forward");
    ln2.forward(ctx, c.x1, w.h2, c.ln2);
    fc1.forward(ctx, w.h2, c.u, c.fc1, act, w.g, c.act);  // bias and GELU in the GEMM where fused
    fc2.forward(ctx, w.g, y, c.fc2);
    strata::nn::add_into(ctx, y, c.x1);
  }
  template <class Ctx>
  void backward(Ctx& ctx, const strata::tensor_for<Ctx>& dy, strata::tensor_for<Ctx>& dx,
                cache<strata::space_of<Ctx>, strata::activation_of<Ctx>>& c) {
    auto& w = strata::scratch_of(ctx, c.work);
    {
      strata::trace_scope part(strata::trace_track::compute, "mlp backward");
      act.forward(ctx, c.u, w.g, c.act);
      fc2.backward(ctx, dy, w.du, c.fc2, act, c.act);  // through GELU: GELU's gradient in the GEMM where fused
      ln2.forward_again(ctx, w.h2, c.ln2);
      fc1.backward(ctx, w.du, w.dh2, c.fc1);
      ln2.backward(ctx, w.dh2, w.dx1, c.ln2);
      strata::nn::add_into(ctx, w.dx1, dy);
    }
    strata::trace_scope part(strata::trace_track::compute, "attn backward");
    ln1.forward_again(ctx, w.h1, c.ln1);
    attn.backward(ctx, w.dx1, w.dh1, c.attn);
    ln1.backward(ctx, w.dh1, dx, c.ln1);
    strata::nn::add_into(ctx, dx, w.dx1);
  }
};

// Fields in forward order; the last is the head with the loss (one value: the micro-batch's mean).
struct model {
  embedding_layer embed;
  std::vector<block> blocks;
  strata::nn::layer_norm ln_f;
  // [V/T, D], no bias: the logits split by vocabulary, made and consumed by the loss a
  // chunk of tokens at a time (never whole).
  strata::nn::linear_cross_entropy head;
};

// GPT-2's initialisation: N(0, 0.02) for matrices, N(0, 0.01) for positions, and the
// projections that write into the residual stream scaled down by sqrt(2 L) so that its
// variance does not grow with depth. Sizes that do not divide over tp_size ranks
// (vocab, heads, MLP width) are config_errors naming the numbers.
inline model make_model(const config& cfg, int tp_rank = 0, int tp_size = 1) {
  namespace sn = strata::nn;
  strata::expects<strata::config_error>(
      cfg.vocab > 0 && cfg.seq > 0 && cfg.dim > 0 && cfg.heads > 0 && cfg.layers > 0,
      strata::cat("gpt::make_model: vocab ", cfg.vocab, ", seq ", cfg.seq, ", dim ", cfg.dim, ", heads ", cfg.heads,
                  ", layers ", cfg.layers, " must all be positive"));
  const auto normal = strata::init_spec::normal(0.02f);
  const auto residual = strata::init_spec::normal(0.02f / std::sqrt(2.0f * static_cast<float>(cfg.layers)));
  model m;
  m.embed.token = sn::make_vocab_parallel_embedding(cfg.vocab, cfg.dim, tp_rank, tp_size, 0.02f);
  m.embed.position = sn::make_position_embedding(cfg.seq, cfg.dim, 0.01f);
  for (int l = 0; l < cfg.layers; ++l) {
    block b{
        sn::make_layer_norm(cfg.dim),           sn::make_causal_self_attention(cfg.dim, cfg.heads, tp_rank, tp_size),
        sn::make_layer_norm(cfg.dim),           sn::make_column_parallel_linear(cfg.dim, 4 * cfg.dim, tp_rank, tp_size),
        sn::gelu{sn::gelu_approximation::tanh}, sn::make_row_parallel_linear(4 * cfg.dim, cfg.dim, tp_rank, tp_size)};
    b.attn.qkv.weight.init = normal;
    b.attn.proj.weight.init = residual;
    b.fc1.weight.init = normal;
    b.fc2.weight.init = residual;
    m.blocks.push_back(std::move(b));
  }
  m.ln_f = sn::make_layer_norm(cfg.dim);
  m.head = sn::make_linear_cross_entropy(cfg.dim, cfg.vocab, tp_rank, tp_size);
  m.head.weight.init = normal;
  return m;
}

// Row r of the stream is seq + 1 tokens of a fixed random Markov chain: the first drawn
// uniformly, each next one among 4 successors of the current token with probabilities
// 0.6, 0.25, 0.1, 0.05. Inputs are tokens 0..seq-1, targets tokens 1..seq. Everything is
// a function of (seed, row): any rank can produce any rows, for any process layout.
class synthetic_tokens {
 public:
  static constexpr int fan_out = 4;
  static constexpr std::array<double, fan_out> probability{0.6, 0.25, 0.1, 0.05};

  synthetic_tokens(const config& cfg, std::uint64_t seed)
      : vocab_(cfg.vocab), seq_(cfg.seq), seed_(seed), next_(static_cast<std::size_t>(cfg.vocab) * fan_out) {
    strata::expects<strata::config_error>(
        cfg.vocab > 0 && cfg.seq > 0,
        strata::cat("gpt::synthetic_tokens: vocab ", cfg.vocab, " and seq ", cfg.seq, " must be positive"));
    const strata::random_stream chain(seed, "markov_chain");
    for (std::size_t i = 0; i < next_.size(); ++i)
      next_[i] = static_cast<int>(chain.bits(i) % static_cast<std::uint64_t>(vocab_));
  }

  // Rows [first_row, first_row + rows) into b: inputs and targets [rows, seq], ids as floats.
  void fill(std::uint64_t first_row, std::int64_t rows, strata::batch<>& b) const {
    b.inputs.resize({rows, seq_});
    b.targets.resize({rows, seq_});
    const strata::random_stream stream(seed_, "token_stream");
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint64_t row = first_row + static_cast<std::uint64_t>(r);
      const auto draw = [&](int pos) { return stream.uniform(row * static_cast<std::uint64_t>(seq_ + 1) + pos); };
      int tok = static_cast<int>(draw(0) * vocab_) % vocab_;
      for (int s = 0; s < seq_; ++s) {
        b.inputs[r * seq_ + s] = static_cast<float>(tok);
        tok = successor(tok, draw(s + 1));
        b.targets[r * seq_ + s] = static_cast<float>(tok);
      }
    }
  }

  // The entropy (nats) of the next token given the current one, averaged uniformly over
  // current tokens: about the loss a model that has learnt the chain reaches (the
  // stream's own token frequencies differ a little from uniform). Duplicate successors
  // merge their probability, so it is at most the 1.09 of four distinct ones.
  double entropy() const {
    double total = 0.0;
    for (int a = 0; a < vocab_; ++a) {
      for (int k = 0; k < fan_out; ++k) {
        double p = 0.0;
        bool first = true;
        for (int j = 0; j < fan_out; ++j) {
          if (next_[a * fan_out + j] != next_[a * fan_out + k]) continue;
          if (j < k) first = false;
          p += probability[j];
        }
        if (first) total -= p * std::log(p);
      }
    }
    return total / vocab_;
  }

 private:
  int successor(int tok, double u) const {
    double c = 0.0;
    for (int k = 0; k < fan_out - 1; ++k) {
      c += probability[k];
      if (u < c) return next_[tok * fan_out + k];
    }
    return next_[tok * fan_out + fan_out - 1];
  }

  int vocab_, seq_;
  std::uint64_t seed_;
  std::vector<int> next_;  // [vocab, fan_out]: the successors of each token
};

}  // namespace gpt
