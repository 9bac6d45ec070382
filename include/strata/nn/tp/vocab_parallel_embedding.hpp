// nn::vocab_parallel_embedding: a token embedding with the vocabulary split by rows over
// the ranks of ctx.tp() (Megatron's VocabParallelEmbedding); with tp_size 1 it is nn::embedding.
#pragma once
#include <cstdint>
#include <string>

#include "../../model/param.hpp"
#include "../../space/tensor.hpp"
#include "../detail/checks.hpp"
#include "../detail/embedding_ops.hpp"
#include "context.hpp"

namespace strata::nn {

// Rank r holds ids [r V/T, (r+1) V/T). Each rank writes the rows of its ids and zeros for
// the others; the all-reduce makes every rank's output the full lookup. Backward is local
// (each rank's rows only). Ids are floats; the rows come out as the context's activations.
struct vocab_parallel_embedding {
  param<float> weight;  // [V/T, dim]
  int tp_rank = 0, tp_size = 1;

  // Act is the context's activation type, taken like every layer's cache; nothing here
  // depends on it (the ids are floats).
  template <class Space = host, class Act = float>
  struct cache {
    const tensor<float, Space>* ids = nullptr;  // the input, kept alive by the trainer until backward
    // Where the ids are not readable by the host: [1], for the id check on the device.
    tensor<unsigned long long, Space> bad_id;
  };

  std::int64_t local_vocab() const noexcept { return weight.shape[0]; }
  std::int64_t vocab() const noexcept { return weight.shape[0] * tp_size; }
  std::int64_t vocab_begin() const noexcept { return weight.shape[0] * tp_rank; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // ids [B] or [B, S] (rank 1 to 3), whole numbers in [0, V) -> y [..., dim].
  template <class Ctx>
  void forward(Ctx& ctx, const float_tensor_for<Ctx>& ids, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    // Every tensor rank holds the same ids, so a bad one throws on all of them, before
    // the all-reduce.
    detail::lookup(ctx, kind, weight, {vocab(), vocab_begin(), local_vocab()}, ids, y, c.bad_id);
    // Exact in any activation type: each element is one rank's value plus zeros.
    if (dist) detail::tp_all_reduce(ctx, y.span());
    c.ids = &ids;
  }

  // weight.grad[id - begin] += dy row for this rank's ids; dx is zeros of the ids' shape
  // (ids are not differentiable, and are floats).
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, float_tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    (void)detail::tp_active(ctx, tp_size, kind, weight.name);
    detail::require_forward_ran(c.ids, kind, weight.name);
    check_params();
    detail::lookup_grad(ctx, kind, weight, {vocab(), vocab_begin(), local_vocab()}, *c.ids, dy, dx);
  }

 private:
  static constexpr const char* kind = "vocab_parallel_embedding";
  void check_params() const {
    expects<config_error>(weight.shape.rank == 2, [&] {
      return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape,
                         "; expected [vocab/T, dim]");
    });
    detail::require_bound(weight, kind, weight.name, "weight");
  }
};

// torch.nn.Embedding initialises with N(0, 1); GPT-style models usually pass 0.02.
inline vocab_parallel_embedding make_vocab_parallel_embedding(int vocab, int dim, int tp_rank, int tp_size,
                                                              float init_stddev = 1.0f) {
  expects<config_error>(dim > 0,
                        [&] { return strata::cat("vocab_parallel_embedding: dim ", dim, " must be positive"); });
  expects<config_error>(vocab <= (1 << 24), [&] {
    return strata::cat("vocab_parallel_embedding: vocab ", vocab, " exceeds 2^24, above which float ids are not exact");
  });
  const auto s = make_tp_slice("vocab_parallel_embedding", vocab, "vocabulary entries", tp_rank, tp_size);
  vocab_parallel_embedding e;
  e.weight = param<float>(shape{s.per_rank, dim}, init_spec::normal(init_stddev));
  e.weight.shard_of(shape{vocab, dim}, 0, s.begin());
  e.tp_rank = tp_rank;
  e.tp_size = tp_size;
  return e;
}

}  // namespace strata::nn
