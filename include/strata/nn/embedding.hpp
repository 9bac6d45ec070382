// nn::embedding: a lookup table from token ids to rows of a [vocab, dim] weight
// (torch.nn.Embedding). Ids travel as floats, exact for every id below 2^24.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../model/param.hpp"
#include "../space/tensor.hpp"
#include "detail/device_ops.hpp"
#include "detail/loops.hpp"

namespace strata::nn {

namespace detail {

// The host's scatter-add into the rows [lo, lo + local) of the vocabulary a weight holds
// (all of it for nn::embedding, a rank's slice for parallel::vocab_parallel_embedding):
// gw[id - lo] += g row t for every token t whose id is in range. Outside the templates.
inline void embedding_scatter_add(std::int64_t n, std::int64_t d, std::int64_t lo, std::int64_t local, const float* ip,
                                  const float* g, float* gw) {
  // Repeated ids add into the same row, so threads split the columns, not the tokens:
  // every element is summed in token order whatever the thread count.
  constexpr std::int64_t block = 64;
  const std::int64_t blocks = (d + block - 1) / block;
#pragma omp parallel for schedule(static) if (n * d >= parallel_threshold && blocks > 1)
  for (std::int64_t bj = 0; bj < blocks; ++bj) {
    const std::int64_t j0 = bj * block, j1 = d < j0 + block ? d : j0 + block;
    for (std::int64_t t = 0; t < n; ++t) {
      const std::int64_t row = static_cast<std::int64_t>(ip[t]) - lo;
      if (row < 0 || row >= local) continue;
      float* wr = gw + row * d;
      const float* gr = g + t * d;
#pragma omp simd
      for (std::int64_t j = j0; j < j1; ++j) wr[j] += gr[j];
    }
  }
}

// The backward of both embeddings in any space, for the rows [lo, lo + local) of the
// vocabulary: grad[id - lo] += dy row for each token whose id is in range, and dx the
// gradient for the ids, which are not differentiable: zeros of the ids' shape.
template <class Ctx>
void embedding_grad(Ctx& ctx, const tensor_for<Ctx>& ids, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                    std::int64_t d, std::int64_t lo, std::int64_t local, float* grad) {
  const std::int64_t n = static_cast<std::int64_t>(ids.numel());
  if constexpr (std::is_same_v<space_of<Ctx>, host>) {
    (void)ctx;
    dx.zeros(ids.shape());
    embedding_scatter_add(n, d, lo, local, ids.data(), dy.data(), grad);
  } else {
    using ops = device_ops_for<space_of<Ctx>>;
    dx.resize(ids.shape());
    ops::fill_zero(ctx.exec(), dx.data(), n);
    ops::embedding_backward(ctx.exec(), n, d, lo, local, ids.data(), dy.data(), grad);
  }
}

}  // namespace detail

struct embedding {
  param<float> weight;  // [vocab, dim]

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* ids = nullptr;  // the input, kept alive by the trainer until backward
    // Outside the host only: [1], the first position whose id is not a token id, found by
    // a kernel (the ids are not readable here) and read back after the forward.
    tensor<unsigned long long, Space> bad_id;
  };

  std::int64_t vocab() const noexcept { return weight.shape[0]; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // ids [B] or [B, S] (any rank up to 3), whole numbers in [0, vocab) -> y [..., dim].
  // An id out of range or not a whole number is a strata::error naming it and where.
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& ids, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    check_params();
    nn::detail::require_distinct(&ids, &y, "embedding", weight.name);
    const auto& s = ids.shape();
    if (s.rank == 0 || s.rank >= shape::max_rank) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label("embedding", weight.name), ": ids have shape ", s,
                                           "; expected rank 1 to 3 ([B] or [B, S])"),
                       std::source_location::current());
    const std::int64_t n = static_cast<std::int64_t>(ids.numel()), d = dim();
    shape out = s;
    out[out.rank++] = d;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      (void)ctx;
      const float* ip = ids.data();
      check_ids(ip, n);
      y.resize(out);
      const float* w = weight.data();
      float* yp = y.data();
      nn::detail::for_rows(n, d, [&](std::int64_t t) {
        std::memcpy(yp + t * d, w + static_cast<std::int64_t>(ip[t]) * d, d * sizeof(float));
      });
    } else {
      y.resize(out);
      c.bad_id.resize(nn::detail::vector_shape(1));
      // The ids are checked where they are, and the stream waited for, before this returns.
      const nn::detail::target_check bad = nn::detail::device_ops_for<space_of<Ctx>>::embedding_forward(
          ctx.exec(), n, d, vocab(), 0, vocab(), ids.data(), weight.data(), y.data(), c.bad_id.data());
      if (bad.row >= 0) [[unlikely]]
        fail_id(bad.value, bad.row);
    }
    c.ids = &ids;
  }

  // weight.grad[id] += dy row for each token. dx is the gradient for the ids, which are
  // not differentiable: it is written as zeros of the ids' shape.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    nn::detail::require_forward_ran(c.ids, "embedding", weight.name);
    check_params();
    nn::detail::require_grad(weight, "embedding", weight.name, "weight");
    const tensor_for<Ctx>& ids = *c.ids;
    shape out = ids.shape();
    out[out.rank++] = dim();
    nn::detail::require_dy(dy, out, "embedding", weight.name);
    nn::detail::require_distinct(&dy, &dx, "embedding", weight.name);
    nn::detail::embedding_grad(ctx, ids, dy, dx, dim(), 0, vocab(), weight.grad());
  }

 private:
  void check_params() const {
    if (weight.shape.rank != 2) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label("embedding", weight.name), ": weight has shape ",
                                           weight.shape, "; expected [vocab, dim]"),
                       std::source_location::current());
    nn::detail::require_bound(weight, "embedding", weight.name, "weight");
  }
  // A serial pass before the (possibly threaded) gather: throwing from inside an OpenMP
  // region would terminate the program.
  void check_ids(const float* ip, std::int64_t n) const {
    const auto v = static_cast<float>(vocab());
    for (std::int64_t t = 0; t < n; ++t) {
      const float id = ip[t];
      if (!(id >= 0.0f && id < v && id == std::floor(id))) [[unlikely]]
        fail_id(id, t);
    }
  }
  [[noreturn]] void fail_id(float id, std::int64_t t) const {
    nn::detail::fail<error>(strata::detail::cat(nn::detail::label("embedding", weight.name), ": token id ", id,
                                                " at position ", t, " is out of range for vocab ", vocab(),
                                                " (ids must be whole numbers in [0, ", vocab(), "))"),
                            std::source_location::current());
  }
};

// torch.nn.Embedding initialises with N(0, 1); GPT-style models usually set 0.02.
inline embedding make_embedding(int vocab, int dim, float init_stddev = 1.0f) {
  strata::expects<config_error>(vocab > 0 && dim > 0, strata::detail::cat("make_embedding(", vocab, ", ", dim,
                                                                          "): vocab and dim must be positive"));
  strata::expects<config_error>(vocab <= (1 << 24),
                                strata::detail::cat("make_embedding: vocab ", vocab,
                                                    " exceeds 2^24, above which float ids are not exact"));
  return embedding{param<float>(shape{vocab, dim}, init_spec::normal(init_stddev))};
}

}  // namespace strata::nn
