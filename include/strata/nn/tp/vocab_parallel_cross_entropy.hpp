// nn::vocab_parallel_cross_entropy: cross-entropy over logits split by vocabulary over the
// ranks of ctx.tp() (Megatron's vocab_parallel_cross_entropy), without gathering them.
#pragma once
#include <cstdint>
#include <span>
#include <string>

#include "../../comm/reduce_op.hpp"
#include "../../space/tensor.hpp"
#include "../context.hpp"
#include "../detail/checks.hpp"
#include "../detail/cross_entropy.hpp"
#include "context.hpp"

namespace strata::nn {

namespace detail {

// The last layer's targets (ctx.targets()) against an input of shape `input` ("logits" or
// the hidden states of a fused head): one class id in [0, vocab) or ignore_label per row
// of its leading shape. Every tensor rank has the same targets, so a bad one throws on all
// of them: before any collective, or (deferred on a GPU) at the same point of the step.
// Sizes the per-row statistics of the cache and copies nothing yet.
template <targets_context Ctx, class Cache>
void check_vocab_targets(Ctx& ctx, const char* kind, const shape& input, const char* input_name, std::int64_t vocab,
                         Cache& c) {
  const float_tensor_for<Ctx>& targets = ctx.targets();
  const std::int64_t rows = rows_of(input);
  expects<config_error>(static_cast<std::int64_t>(targets.numel()) == rows && targets.shape().rank + 1 == input.rank,
                        [&] {
                          return strata::cat(kind, ": targets have shape ", targets.shape(), " for ", input_name, " ",
                                             input, "; expected one class id per row of the leading shape");
                        });
  check_ids(exec_of(ctx), id_checks_of(ctx), rows, vocab, targets.data(), c.bad_row, true,
            [kind, vocab](float t, std::int64_t r) {
              return strata::cat(kind, ": target ", t, " at row ", r, " is not a class id in [0, ", vocab,
                                 ") nor ignore_label (", ignore_label, ")");
            });
  c.row_max.resize(vector_shape(rows));
  c.log_sum.resize(vector_shape(rows));
  c.target.resize(vector_shape(rows));
  c.row_loss.resize(vector_shape(rows));
}

// The loss statistics of rows [r0, r0 + n) of the micro-batch, whose logits on this rank's
// columns [lo, lo + classes) are `logits` ([n, classes]): the row maxima and the sums of
// exponentials with the target logits, each all-reduced over ctx.tp() when dist, then each
// row's log-sum and loss. sums is 2n doubles of scratch.
template <targets_context Ctx, class Cache>
void vocab_loss_rows(Ctx& ctx, bool dist, const activation_of<Ctx>* logits, std::int64_t r0, std::int64_t n,
                     std::int64_t classes, std::int64_t lo, Cache& c, double* sums) {
  using ops = ops_of<Ctx>;
  const auto exec = exec_of(ctx);
  float* row_max = c.row_max.data() + r0;
  float* target = c.target.data() + r0;
  ops::rows(exec, n, classes,
            vocab_max_rows_fn<activation_of<Ctx>>{logits, ctx.targets().data() + r0, row_max, target, classes});
  // Subtracting the global row max keeps every exp in (0, 1] on every rank.
  if (dist) tp_all_reduce(ctx, std::span<float>(row_max, static_cast<std::size_t>(n)), reduce_op::max);
  ops::rows(exec, n, classes, vocab_sum_rows_fn<activation_of<Ctx>>{logits, row_max, target, sums, n, classes, lo});
  if (dist) tp_all_reduce(ctx, std::span<double>(sums, static_cast<std::size_t>(2 * n)));
  ops::map(exec, n, vocab_finish_fn{row_max, sums, target, c.log_sum.data() + r0, c.row_loss.data() + r0, n});
}

// y [1] = the sum of the rows' losses over the label count (kept for backward).
template <targets_context Ctx, class Cache>
void finish_mean_loss(Ctx& ctx, std::int64_t rows, Cache& c, float_tensor_for<Ctx>& y) {
  c.count = label_count(ctx, rows);
  ops_of<Ctx>::mean(exec_of(ctx), rows, row_loss_term{c.row_loss.data()}, c.count, y.data());
}

}  // namespace detail

// The logits are what a column_parallel_linear head without gather_output produces. The
// loss is the mean over labels of log sum_j exp(x_j) - x_target (ignore_label rows add
// nothing; the count is rows or the trainer's, as in softmax_cross_entropy). Forward all-reduces the row
// maxima, then the sums of exponentials with the target logits (one packed all-reduce);
// backward is local: dx = dy[0] / count * (softmax - onehot) on this rank's columns. With
// tp_size 1 it gives nn::softmax_cross_entropy's bits. The logits (and their gradient) are
// the context's activations; the per-row statistics, their all-reduces, the targets and
// the loss stay float (double for the sums) whatever those are.
struct vocab_parallel_cross_entropy {
  // A trainer counts this loss's labels (see detail::label_count).
  static constexpr bool counts_labels = true;
  std::int64_t vocab = 0;  // the full vocabulary
  int tp_rank = 0, tp_size = 1;

  template <class Space = host, class Act = float>
  struct cache : detail::cross_entropy_cache<Space, Act> {
    tensor<double, Space> sums;  // [2 rows]: sum of exp(x - m), then the target logit
  };

  std::int64_t local_vocab() const noexcept { return tp_size > 0 ? vocab / tp_size : 0; }
  std::int64_t vocab_begin() const noexcept { return local_vocab() * tp_rank; }

  // logits [..., V/T] (this rank's columns) and ctx.targets() of the leading shape,
  // holding ids in [0, V) -> y [1] = mean loss over rows, the same on every rank.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& logits, float_tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    const bool dist = detail::tp_active(ctx, tp_size, kind, std::string());
    detail::require_distinct(&logits, &y, kind, std::string());
    const std::int64_t classes = local_vocab(), lo = vocab_begin();
    detail::require_features(logits, classes, kind, std::string(), "this rank's vocabulary slice");
    const std::int64_t rows = detail::rows_of(logits.shape());
    detail::check_vocab_targets(ctx, kind, logits.shape(), "logits", vocab, c);
    c.sums.resize(detail::vector_shape(2 * rows));
    y.resize(detail::vector_shape(1));
    detail::vocab_loss_rows(ctx, dist, logits.data(), 0, rows, classes, lo, c, c.sums.data());
    detail::finish_mean_loss(ctx, rows, c, y);
    c.logits = &logits;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const float_tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    (void)detail::tp_active(ctx, tp_size, kind, std::string());
    detail::require_forward_ran(c.logits, kind, std::string());
    detail::require_dy(dy, detail::vector_shape(1), kind, std::string());
    detail::require_distinct(&dy, &dx, kind, std::string());
    const tensor_for<Ctx>& x = *c.logits;
    const std::int64_t classes = local_vocab(), lo = vocab_begin(), rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    ops_of<Ctx>::rows(exec_of(ctx), rows, classes,
                      detail::softmax_grad_rows_fn<activation_of<Ctx>>{x.data(), c.row_max.data(), c.log_sum.data(),
                                                                       c.target.data(), dy.data(), dx.data(),
                                                                       static_cast<float>(c.count), classes, lo});
  }

 private:
  static constexpr const char* kind = "vocab_parallel_cross_entropy";
};

inline vocab_parallel_cross_entropy make_vocab_parallel_cross_entropy(int vocab, int tp_rank, int tp_size) {
  expects<config_error>(vocab <= (1 << 24), [&] {
    return strata::cat("vocab_parallel_cross_entropy: vocab ", vocab,
                       " exceeds 2^24, above which float ids are not exact");
  });
  const auto s = make_tp_slice("vocab_parallel_cross_entropy", vocab, "vocabulary entries", tp_rank, tp_size);
  return vocab_parallel_cross_entropy{vocab, s.rank, s.size};
}

}  // namespace strata::nn
