// nn::softmax_cross_entropy: the mean over rows of -log softmax(logits)[target], the
// classification loss of torch.nn.CrossEntropyLoss, as the last layer of a model. The
// logits (and their gradient) are the context's activations; the softmax's statistics,
// the targets and the loss are float whatever those are.
#pragma once
#include <cstdint>
#include <string>
#include <type_traits>

#include "../space/tensor.hpp"
#include "context.hpp"
#include "detail/checks.hpp"
#include "detail/cross_entropy.hpp"

namespace strata::nn {

struct softmax_cross_entropy {
  // A trainer counts this loss's labels (see detail::label_count).
  static constexpr bool counts_labels = true;
  template <class Space = host, class Act = float>
  struct cache : detail::cross_entropy_cache<Space, Act> {};

  // logits [..., C] and targets of the leading shape ([B] for [B, C], [B, S] for
  // [B, S, C]) holding class ids in [0, C) or ignore_label -> y [1] = the sum of the
  // rows' losses over the label count: rows, or what a trainer's context says (the
  // labels not ignored), PyTorch's ignore_index mean.
  template <targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& logits, float_tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    run_forward(exec_of(ctx), id_checks_of(ctx), logits, ctx.targets(), y, c,
                [&](std::int64_t rows) { return detail::label_count(ctx, rows); });
  }

  // dx = dy[0] * (softmax(logits) - onehot(target)) / count, 0 on ignored rows.
  template <class Ctx>
  void backward(Ctx& ctx, const float_tensor_for<Ctx>& dy, tensor_for<Ctx>& dx,
                cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.logits, kind, std::string());
    detail::require_dy(dy, detail::vector_shape(1), kind, std::string());
    detail::require_distinct(&dy, &dx, kind, std::string());
    const tensor_for<Ctx>& x = *c.logits;
    const std::int64_t classes = x.shape()[x.shape().rank - 1], rows = detail::rows_of(x.shape());
    dx.resize(x.shape());
    ops_of<Ctx>::rows(exec_of(ctx), rows, classes,
                      detail::softmax_grad_rows_fn<activation_of<Ctx>>{x.data(), c.row_max.data(), c.log_sum.data(),
                                                                       c.target.data(), dy.data(), dx.data(),
                                                                       static_cast<float>(c.count), classes, 0});
  }

  // The forward without a context (on the host): the loss of logits against explicit
  // targets.
  void loss(const tensor<float>& logits, const tensor<float>& targets, tensor<float>& y, cache<>& c) const {
    run_forward(executor<host>{}, nullptr, logits, targets, y, c,
                [](std::int64_t rows) { return static_cast<double>(rows); });
  }

 private:
  static constexpr const char* kind = "softmax_cross_entropy";

  template <class Space, class T, class Count>
  static void run_forward(const executor<Space>& exec, std::type_identity_t<deferred_id_checks<Space>>* deferred,
                          const tensor<T, Space>& logits, const tensor<float, Space>& targets, tensor<float, Space>& y,
                          cache<Space, T>& c, const Count& count) {
    using ops = ops_for<Space>;
    detail::require_distinct(&logits, &y, kind, std::string());
    const auto& s = logits.shape();
    expects<config_error>(s.rank != 0 && s[s.rank - 1] != 0, [&] {
      return strata::cat(kind, ": logits have shape ", s, "; expected [..., classes] with classes > 0");
    });
    const std::int64_t classes = s[s.rank - 1], rows = detail::rows_of(s);
    expects<config_error>(static_cast<std::int64_t>(targets.numel()) == rows && targets.shape().rank + 1 == s.rank,
                          [&] {
                            shape leading = s;
                            --leading.rank;
                            return strata::cat(kind, ": targets have shape ", targets.shape(), " for logits ", s,
                                               "; expected one class id per row, shape ", leading);
                          });
    detail::check_ids(exec, deferred, rows, classes, targets.data(), c.bad_row, true,
                      [classes](float t, std::int64_t r) {
                        return strata::cat(kind, ": target ", t, " at row ", r, " is not a class id in [0, ", classes,
                                           ") nor ignore_label (", ignore_label, ")");
                      });
    c.row_max.resize(detail::vector_shape(rows));
    c.log_sum.resize(detail::vector_shape(rows));
    c.target.resize(detail::vector_shape(rows));
    c.row_loss.resize(detail::vector_shape(rows));
    y.resize(detail::vector_shape(1));
    ops::rows(exec, rows, classes,
              detail::cross_entropy_rows_fn<T>{logits.data(), targets.data(), c.row_max.data(), c.log_sum.data(),
                                               c.target.data(), c.row_loss.data(), classes});
    c.count = count(rows);
    ops::mean(exec, rows, detail::row_loss_term{c.row_loss.data()}, c.count, y.data());
    c.logits = &logits;
  }
};

}  // namespace strata::nn
