// nn::linear_cross_entropy: a language model's head and its loss in one layer, over
// chunks of tokens, so that the [tokens, vocabulary] logits are never whole in memory
// (the fused linear cross-entropy of Liger's kernels, the blocked recomputation of Cut
// Cross-Entropy). Split by vocabulary over the ranks of ctx.tp() as
// column_parallel_linear + vocab_parallel_cross_entropy are, and equal to them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>

#include "../../comm/request.hpp"
#include "../../model/param.hpp"
#include "../../space/tensor.hpp"
#include "../context.hpp"
#include "../detail/checks.hpp"
#include "../detail/cross_entropy.hpp"
#include "../detail/linear_ops.hpp"
#include "context.hpp"
#include "vocab_parallel_cross_entropy.hpp"

namespace strata::nn {

// Rank r holds rows [r V/T, (r+1) V/T) of the [V, D] head weight (no bias). Forward takes
// the hidden states x [..., D] and the targets, and for each chunk of rows makes that
// chunk's logits in one buffer, keeps each row's max and log-sum (all-reduced over the
// tensor ranks, as vocab_parallel_cross_entropy does), and returns the mean loss.
// Backward makes each chunk's logits again, turns them into their gradient in place, and
// from it dx (all-reduced over the tensor ranks) and weight.grad. The price of never
// holding the logits is one more GEMM of the head's three: the forward one, again in
// backward (Cut Cross-Entropy's trade; computing the gradients in forward, as Liger
// does, needs the weight's gradient bound before backward, which ZeRO-2/3's buckets are
// not). Each row's statistics, hence the loss and its gradient, are those of the unfused
// pair up to the GEMMs' summation order (per chunk rather than over all rows for
// weight.grad).
struct linear_cross_entropy {
  // A trainer counts this loss's labels (see detail::label_count).
  static constexpr bool counts_labels = true;
  // Chunks hold at most this many logits (rows x this rank's vocabulary), in whole rows:
  // 2^26 is 128 MiB of 16-bit logits, 440 rows of Qwen2's 151,936 ids, rows enough that
  // the GEMMs stay efficient. 0 means every row in one chunk (the unfused layers' memory).
  static constexpr std::int64_t default_chunk_elements = std::int64_t{1} << 26;

  param<float> weight;  // [V/T, D]
  std::int64_t vocab = 0;
  std::int64_t chunk_elements = default_chunk_elements;
  int tp_rank = 0, tp_size = 1;

  template <class Space = host, class Act = float>
  struct cache : detail::cross_entropy_stats<Space> {
    const tensor<Act, Space>* x = nullptr;  // the hidden states, kept alive by the trainer until backward
    tensor<Act, Space> logits;              // [chunk, V/T]: one chunk's logits, then their gradient
    tensor<double, Space> sums;             // [2 chunk]: sums of exp(x - m), then the target logits
  };

  std::int64_t in_features() const noexcept { return weight.shape[1]; }
  std::int64_t local_vocab() const noexcept { return weight.shape[0]; }
  std::int64_t vocab_begin() const noexcept { return local_vocab() * tp_rank; }

  // Rows a chunk holds for `rows` rows: whole rows within chunk_elements, a multiple of 8
  // where that leaves at least 8 (so every chunk's first row stays 16-byte aligned for the
  // GEMMs), at least 1.
  std::int64_t chunk_rows(std::int64_t rows) const noexcept {
    if (chunk_elements <= 0 || rows == 0) return rows;
    std::int64_t n = std::max<std::int64_t>(1, chunk_elements / std::max<std::int64_t>(1, local_vocab()));
    if (n >= 8) n -= n % 8;
    return std::min(n, rows);
  }

  // x [..., D] and ctx.targets() of x's leading shape -> y [1]: the mean over labels of
  // log sum_j exp(l_j) - l_target, l = x W^T, the same on every tensor rank.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, float_tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    detail::require_features(x, in_features(), kind, weight.name, "weight");
    detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = detail::rows_of(x.shape()), chunk = chunk_rows(rows);
    detail::check_vocab_targets(ctx, kind, x.shape(), "hidden states", vocab, c);
    c.logits.resize(detail::vector_shape(chunk * local_vocab()));
    c.sums.resize(detail::vector_shape(2 * chunk));
    y.resize(detail::vector_shape(1));
    for_each_chunk(rows, chunk, [&](std::int64_t r0, std::int64_t n) {
      chunk_logits(ctx, x, r0, n, c.logits.data());
      detail::vocab_loss_rows(ctx, dist, c.logits.data(), r0, n, local_vocab(), vocab_begin(), c, c.sums.data());
    });
    detail::finish_mean_loss(ctx, rows, c, y);
    c.x = &x;
  }

  // dl = dy[0] / count * (softmax(l) - onehot(target)) per chunk (0 on ignored rows);
  // dx = dl W, all-reduced over the tensor ranks; weight.grad += dl^T x.
  template <class Ctx>
  void backward(Ctx& ctx, const float_tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    const bool dist = detail::tp_active(ctx, tp_size, kind, weight.name);
    detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    detail::require_grad(weight, kind, weight.name, "weight");
    detail::require_dy(dy, detail::vector_shape(1), kind, weight.name);
    detail::require_distinct(&dy, &dx, kind, weight.name);
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t rows = detail::rows_of(x.shape()), in = in_features(), classes = local_vocab();
    dx.resize(x.shape());
    using T = activation_of<Ctx>;
    T* dl = c.logits.data();
    for_each_chunk(rows, chunk_rows(rows), [&](std::int64_t r0, std::int64_t n) {
      chunk_logits(ctx, x, r0, n, dl);
      // In place: each element of the gradient reads only its own logit.
      ops_of<Ctx>::rows(
          exec_of(ctx), n, classes,
          detail::softmax_grad_rows_fn<T>{dl, c.row_max.data() + r0, c.log_sum.data() + r0, c.target.data() + r0,
                                          dy.data(), dl, static_cast<float>(c.count), classes, vocab_begin()});
      detail::linear_input_grad(ctx, dl, n, classes, weights_of<Ctx>(weight), in, dx.data() + r0 * in);
      detail::linear_param_grads(ctx, dl, x.data() + r0 * in, n, classes, in, weight.grad(), nullptr);
    });
    // Each rank's dx is the contribution of its vocabulary slice: the sum is the full dx.
    if (dist) detail::tp_all_reduce(ctx, dx.span());
  }

  // The logits themselves, x [..., D] -> y [..., V/T] (this rank's columns): for
  // evaluation and generation, where they are wanted; training never makes them whole.
  template <class Ctx>
  void logits(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y) const {
    (void)detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    detail::require_features(x, in_features(), kind, weight.name, "weight");
    detail::require_distinct(&x, &y, kind, weight.name);
    y.resize(detail::with_last(x.shape(), local_vocab()));
    detail::linear_forward(ctx, x.data(), detail::rows_of(x.shape()), in_features(), weights_of<Ctx>(weight),
                           local_vocab(), nullptr, y.data());
  }

 private:
  static constexpr const char* kind = "linear_cross_entropy";

  template <class F>
  static void for_each_chunk(std::int64_t rows, std::int64_t chunk, F&& f) {
    for (std::int64_t r0 = 0; r0 < rows; r0 += chunk) f(r0, std::min(chunk, rows - r0));
  }

  template <class Ctx>
  void chunk_logits(Ctx& ctx, const tensor_for<Ctx>& x, std::int64_t r0, std::int64_t n,
                    activation_of<Ctx>* out) const {
    detail::linear_forward(ctx, x.data() + r0 * in_features(), n, in_features(), weights_of<Ctx>(weight), local_vocab(),
                           nullptr, out);
  }

  void check_params() const {
    expects<config_error>(weight.shape.rank == 2 && weight.shape[0] * tp_size == vocab, [&] {
      return strata::cat(detail::label(kind, weight.name), ": weight has shape ", weight.shape, " for vocab ", vocab,
                         " over ", tp_size, " tensor-parallel ranks; expected [vocab / ranks, hidden]");
    });
    detail::require_bound(weight, kind, weight.name, "weight");
  }
};

// The head of `hidden` features over `vocab` ids, rank tp_rank's slice of tp_size, its
// weight drawn like torch.nn.Linear's over the full [vocab, hidden] tensor (uniform in
// +-1/sqrt(hidden)); chunk_elements as in linear_cross_entropy.
inline linear_cross_entropy make_linear_cross_entropy(
    int hidden, int vocab, int tp_rank, int tp_size,
    std::int64_t chunk_elements = linear_cross_entropy::default_chunk_elements) {
  expects<config_error>(
      hidden > 0, [&] { return strata::cat("linear_cross_entropy: ", hidden, " hidden features (must be positive)"); });
  expects<config_error>(vocab <= (1 << 24), [&] {
    return strata::cat("linear_cross_entropy: vocab ", vocab, " exceeds 2^24, above which float ids are not exact");
  });
  const auto s = make_tp_slice("linear_cross_entropy", vocab, "vocabulary entries", tp_rank, tp_size);
  linear_cross_entropy l;
  l.weight = param<float>(shape{s.per_rank, hidden}, init_spec::uniform(1.0f / std::sqrt(static_cast<float>(hidden))));
  l.weight.shard_of(shape{vocab, hidden}, 0, s.begin());
  l.vocab = vocab;
  l.chunk_elements = chunk_elements;
  l.tp_rank = s.rank;
  l.tp_size = s.size;
  return l;
}

}  // namespace strata::nn
