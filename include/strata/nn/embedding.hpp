// nn::embedding: a lookup table from token ids to rows of a [vocab, dim] weight
// (torch.nn.Embedding). Ids travel as floats, exact for every id below 2^24, whatever the
// context's activations; the rows come out as those activations.
#pragma once
#include <cstdint>
#include <string>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "detail/embedding_ops.hpp"

namespace strata::nn {

struct embedding {
  param<float> weight;  // [vocab, dim]

  // Act is the context's activation type, taken like every layer's cache; nothing here
  // depends on it (the ids are floats).
  template <class Space = host, class Act = float>
  struct cache {
    const tensor<float, Space>* ids = nullptr;  // the input, kept alive by the trainer until backward
    // Where the ids are not readable by the host: [1], for the id check on the device.
    tensor<unsigned long long, Space> bad_id;
  };

  std::int64_t vocab() const noexcept { return weight.shape[0]; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // ids [B] or [B, S] (any rank up to 3), whole numbers in [0, vocab) -> y [..., dim].
  // An id out of range or not a whole number is a strata::error naming it and where.
  template <class Ctx>
  void forward(Ctx& ctx, const float_tensor_for<Ctx>& ids, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    check_params();
    detail::lookup(ctx, kind, weight, {vocab(), 0, vocab()}, ids, y, c.bad_id);
    c.ids = &ids;
  }

  // weight.grad[id] += dy row for each token. dx is the gradient for the ids, which are
  // not differentiable: it is written as (float) zeros of the ids' shape.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, float_tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.ids, kind, weight.name);
    check_params();
    detail::lookup_grad(ctx, kind, weight, {vocab(), 0, vocab()}, *c.ids, dy, dx);
  }

 private:
  static constexpr const char* kind = "embedding";
  void check_params() const {
    expects<config_error>(weight.shape.rank == 2, [&] {
      return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape,
                         "; expected [vocab, dim]");
    });
    detail::require_bound(weight, kind, weight.name, "weight");
  }
};

// torch.nn.Embedding initialises with N(0, 1); GPT-style models usually set 0.02.
inline embedding make_embedding(int vocab, int dim, float init_stddev = 1.0f) {
  strata::expects<config_error>(vocab > 0 && dim > 0,
                                strata::cat("make_embedding(", vocab, ", ", dim, "): vocab and dim must be positive"));
  strata::expects<config_error>(vocab <= (1 << 24), strata::cat("make_embedding: vocab ", vocab,
                                                                " exceeds 2^24, above which float ids are not exact"));
  return embedding{param<float>(shape{vocab, dim}, init_spec::normal(init_stddev))};
}

}  // namespace strata::nn
