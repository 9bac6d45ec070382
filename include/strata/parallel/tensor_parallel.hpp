// Megatron-style tensor-parallel layers: each rank of ctx.tp() holds a slice of a weight
// and the layers put their collectives where Megatron does. With tp_size 1 they are the
// plain layers (nn::linear, nn::embedding, nn::softmax_cross_entropy) and communicate nothing.
// They run in any space: on a GPU ctx.tp() is an nccl_comm and every buffer it moves is
// already device memory (activations, and the cross-entropy's per-row maxima and sums).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>

#include "../comm/reduce_op.hpp"
#include "../comm/request.hpp"
#include "../model/param.hpp"
#include "../nn/context.hpp"
#include "../nn/detail/device_ops.hpp"
#include "../nn/detail/loops.hpp"
#include "../nn/embedding.hpp"
#include "../space/tensor.hpp"
#include "detail/tp_common.hpp"
#include "detail/tp_linear.hpp"

namespace strata::parallel {

// y = x W^T + b with W split by output rows: rank r holds rows [r out/T, (r+1) out/T) of
// the full [out, in] weight and the same slice of the bias. The input is whole on every
// rank; the output is this rank's slice of the features, or, with gather_output, all of
// them. Backward all-reduces dx (Megatron's "f"), overlapped with the weight-grad GEMM.
struct column_parallel_linear {
  param<float> weight;  // [out/T, in]
  param<float> bias;    // [out/T], or [0] without bias
  bool gather_output = false;
  int tp_rank = 0, tp_size = 1;

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
    tensor<float, Space> local;               // with gather_output: this rank's slice of y
    tensor<float, Space> gathered;            // [T, rows, out/T] as all_gather leaves it
    tensor<float, Space> dy_local;            // with gather_output: this rank's slice of dy
  };

  std::int64_t in_features() const noexcept { return weight.shape[1]; }
  std::int64_t local_out_features() const noexcept { return weight.shape[0]; }
  std::int64_t out_features() const noexcept { return weight.shape[0] * tp_size; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    const bool dist = strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    const std::int64_t in = in_features(), out_l = local_out_features();
    nn::detail::require_features(x, in, kind, weight.name, "weight");
    nn::detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    const float* b = has_bias() ? bias.data() : nullptr;
    if (dist && gather_output) {
      c.local.resize(nn::detail::with_last(x.shape(), out_l));
      strata::detail::linear_forward(ctx, x.data(), rows, in, weight.data(), out_l, b, c.local.data());
      c.gathered.resize(nn::detail::vector_shape(rows * out_l * tp_size));
      strata::detail::tp_all_gather(ctx, c.local.span(), c.gathered.span());
      y.resize(nn::detail::with_last(x.shape(), out_features()));
      strata::detail::concat_blocks(ctx, c.gathered.data(), tp_size, rows, out_l, y.data());
    } else {
      y.resize(nn::detail::with_last(x.shape(), out_l));
      strata::detail::linear_forward(ctx, x.data(), rows, in, weight.data(), out_l, b, y.data());
    }
    c.x = &x;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    const bool dist = strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    nn::detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    nn::detail::require_grad(weight, kind, weight.name, "weight");
    nn::detail::require_grad(bias, kind, weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t in = in_features(), out_l = local_out_features();
    const bool gathered = dist && gather_output;
    nn::detail::require_dy(dy, nn::detail::with_last(x.shape(), gathered ? out_features() : out_l), kind, weight.name);
    nn::detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    const float* g = dy.data();
    if (gathered) {
      c.dy_local.resize(nn::detail::with_last(x.shape(), out_l));
      strata::detail::take_block(ctx, dy.data(), tp_size, tp_rank, rows, out_l, c.dy_local.data());
      g = c.dy_local.data();
    }
    dx.resize(x.shape());
    strata::detail::linear_input_grad(ctx, g, rows, out_l, weight.data(), in, dx.data());
    // Each rank's dx is the contribution of its output slice: the sum is the full dx.
    // The all-reduce runs on the communicator's lane (NCCL: its stream) while the
    // weight-grad GEMM runs here (on the compute stream).
    request pending = dist ? strata::detail::tp_all_reduce_async(ctx, dx.span()) : request{};
    strata::detail::linear_param_grads(ctx, g, x.data(), rows, out_l, in, weight.grad(),
                                       has_bias() ? bias.grad() : nullptr);
    pending.wait();
  }

 private:
  static constexpr const char* kind = "column_parallel_linear";
  void check_params() const {
    if (weight.shape.rank != 2 || (has_bias() && bias.numel() != static_cast<std::size_t>(weight.shape[0])))
        [[unlikely]]
      nn::detail::fail(
          strata::detail::cat(nn::detail::label(kind, weight.name), ": weight has shape ", weight.shape, " and bias ",
                              bias.shape, "; expected [out/T, in] and [out/T] (or [0] without bias)"),
          std::source_location::current());
    nn::detail::require_bound(weight, kind, weight.name, "weight");
    nn::detail::require_bound(bias, kind, weight.name, "bias");
  }
};

// y = all_reduce(x_r W_r^T) + b with W split by input columns: rank r holds columns
// [r in/T, (r+1) in/T) of the full [out, in] weight and takes the matching slice of the
// features as input (what a column_parallel_linear without gather_output produces). The
// bias is whole on every rank and added once, after the reduction. Backward is local.
struct row_parallel_linear {
  param<float> weight;  // [out, in/T]
  param<float> bias;    // [out] (replicated), or [0] without bias
  int tp_rank = 0, tp_size = 1;

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* x = nullptr;  // the input slice, kept alive by the trainer until backward
  };

  std::int64_t local_in_features() const noexcept { return weight.shape[1]; }
  std::int64_t in_features() const noexcept { return weight.shape[1] * tp_size; }
  std::int64_t out_features() const noexcept { return weight.shape[0]; }
  bool has_bias() const noexcept { return bias.numel() != 0; }

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    const bool dist = strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    const std::int64_t in_l = local_in_features(), out = out_features();
    nn::detail::require_features(x, in_l, kind, weight.name, "weight slice");
    nn::detail::require_distinct(&x, &y, kind, weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    y.resize(nn::detail::with_last(x.shape(), out));
    if (!dist) {
      strata::detail::linear_forward(ctx, x.data(), rows, in_l, weight.data(), out,
                                     has_bias() ? bias.data() : nullptr, y.data());
    } else {
      strata::detail::linear_forward(ctx, x.data(), rows, in_l, weight.data(), out, nullptr, y.data());
      // The next layer needs the whole sum: nothing can overlap this reduction.
      strata::detail::tp_all_reduce(ctx, y.span());
      if (has_bias()) strata::detail::add_bias(ctx, rows, out, bias.data(), y.data());
    }
    c.x = &x;
  }

  // dx (this rank's slice) = dy W_r; W_r.grad += dy^T x_r; bias.grad += column sums of dy,
  // the same full bias gradient on every rank.
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    (void)strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    nn::detail::require_forward_ran(c.x, kind, weight.name);
    check_params();
    nn::detail::require_grad(weight, kind, weight.name, "weight");
    nn::detail::require_grad(bias, kind, weight.name, "bias");
    const tensor_for<Ctx>& x = *c.x;
    const std::int64_t in_l = local_in_features(), out = out_features();
    nn::detail::require_dy(dy, nn::detail::with_last(x.shape(), out), kind, weight.name);
    nn::detail::require_distinct(&dy, &dx, kind, weight.name);
    const std::int64_t rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
    strata::detail::linear_input_grad(ctx, dy.data(), rows, out, weight.data(), in_l, dx.data());
    strata::detail::linear_param_grads(ctx, dy.data(), x.data(), rows, out, in_l, weight.grad(),
                                       has_bias() ? bias.grad() : nullptr);
  }

 private:
  static constexpr const char* kind = "row_parallel_linear";
  void check_params() const {
    if (weight.shape.rank != 2 || (has_bias() && bias.numel() != static_cast<std::size_t>(weight.shape[0])))
        [[unlikely]]
      nn::detail::fail(
          strata::detail::cat(nn::detail::label(kind, weight.name), ": weight has shape ", weight.shape, " and bias ",
                              bias.shape, "; expected [out, in/T] and [out] (or [0] without bias)"),
          std::source_location::current());
    nn::detail::require_bound(weight, kind, weight.name, "weight");
    nn::detail::require_bound(bias, kind, weight.name, "bias");
  }
};

// Token embedding with the vocabulary split by rows: rank r holds ids [r V/T, (r+1) V/T).
// Each rank writes the rows of its ids and zeros for the others; the all-reduce makes
// every rank's output the full lookup. Backward is local (each rank's rows only).
struct vocab_parallel_embedding {
  param<float> weight;  // [V/T, dim]
  int tp_rank = 0, tp_size = 1;

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* ids = nullptr;  // the input, kept alive by the trainer until backward
    // Outside the host only: [1], the first position whose id is not a token id, found by
    // a kernel and read back after the forward.
    tensor<unsigned long long, Space> bad_id;
  };

  std::int64_t local_vocab() const noexcept { return weight.shape[0]; }
  std::int64_t vocab() const noexcept { return weight.shape[0] * tp_size; }
  std::int64_t vocab_begin() const noexcept { return weight.shape[0] * tp_rank; }
  std::int64_t dim() const noexcept { return weight.shape[1]; }

  // ids [B] or [B, S] (rank 1 to 3), whole numbers in [0, V) -> y [..., dim].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& ids, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    const bool dist = strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    check_params();
    nn::detail::require_distinct(&ids, &y, kind, weight.name);
    const auto& s = ids.shape();
    if (s.rank == 0 || s.rank >= shape::max_rank) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label(kind, weight.name), ": ids have shape ", s,
                                           "; expected rank 1 to 3 ([B] or [B, S])"),
                       std::source_location::current());
    const std::int64_t n = static_cast<std::int64_t>(ids.numel()), d = dim();
    const std::int64_t lo = vocab_begin(), local = local_vocab();
    shape out = s;
    out[out.rank++] = d;
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      check_ids(ids.data(), n);
      y.resize(out);
      const float* ip = ids.data();
      const float* w = weight.data();
      float* yp = y.data();
      nn::detail::for_rows(n, d, [&](std::int64_t t) {
        const std::int64_t row = static_cast<std::int64_t>(ip[t]) - lo;
        if (row >= 0 && row < local)
          std::memcpy(yp + t * d, w + row * d, d * sizeof(float));
        else
          std::memset(yp + t * d, 0, d * sizeof(float));
      });
    } else {
      y.resize(out);
      c.bad_id.resize(nn::detail::vector_shape(1));
      // Every tensor rank holds the same ids, so a bad one throws on all of them, before
      // the all-reduce.
      const nn::detail::target_check bad = nn::detail::device_ops_for<space_of<Ctx>>::embedding_forward(
          ctx.exec(), n, d, vocab(), lo, local, ids.data(), weight.data(), y.data(), c.bad_id.data());
      if (bad.row >= 0) [[unlikely]]
        fail_id(bad.value, bad.row);
    }
    if (dist) strata::detail::tp_all_reduce(ctx, y.span());
    c.ids = &ids;
  }

  // weight.grad[id - begin] += dy row for this rank's ids; dx is zeros of the ids' shape
  // (ids are not differentiable).
  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    (void)strata::detail::tp_active(ctx, tp_size, kind, weight.name);
    nn::detail::require_forward_ran(c.ids, kind, weight.name);
    check_params();
    nn::detail::require_grad(weight, kind, weight.name, "weight");
    const tensor_for<Ctx>& ids = *c.ids;
    shape out = ids.shape();
    out[out.rank++] = dim();
    nn::detail::require_dy(dy, out, kind, weight.name);
    nn::detail::require_distinct(&dy, &dx, kind, weight.name);
    // nn::embedding's backward, on this rank's rows of the vocabulary.
    nn::detail::embedding_grad(ctx, ids, dy, dx, dim(), vocab_begin(), local_vocab(), weight.grad());
  }

 private:
  static constexpr const char* kind = "vocab_parallel_embedding";
  void check_params() const {
    if (weight.shape.rank != 2) [[unlikely]]
      nn::detail::fail(strata::detail::cat(nn::detail::label(kind, weight.name), ": weight has shape ", weight.shape,
                                           "; expected [vocab/T, dim]"),
                       std::source_location::current());
    nn::detail::require_bound(weight, kind, weight.name, "weight");
  }
  // Serial, before the threaded gather: throwing inside an OpenMP region terminates.
  void check_ids(const float* ip, std::int64_t n) const {
    const auto v = static_cast<float>(vocab());
    for (std::int64_t t = 0; t < n; ++t) {
      const float id = ip[t];
      if (!(id >= 0.0f && id < v && id == std::floor(id))) [[unlikely]]
        fail_id(id, t);
    }
  }
  [[noreturn]] void fail_id(float id, std::int64_t t) const {
    nn::detail::fail<error>(strata::detail::cat(nn::detail::label(kind, weight.name), ": token id ", id,
                                                " at position ", t, " is out of range for vocab ", vocab(),
                                                " (ids must be whole numbers in [0, ", vocab(), "))"),
                            std::source_location::current());
  }
};

// Cross-entropy over logits split by vocabulary (what a column_parallel_linear head
// without gather_output produces): the mean over rows of log sum_j exp(x_j) - x_target,
// without ever gathering the logits. Forward all-reduces the row maxima, then the sums
// of exponentials with the target logits (one packed all-reduce); backward is local:
// dx = dy[0] / rows * (softmax - onehot) on this rank's columns.
struct vocab_parallel_cross_entropy {
  std::int64_t vocab = 0;  // the full vocabulary
  int tp_rank = 0, tp_size = 1;

  template <class Space = host>
  struct cache {
    const tensor<float, Space>* logits = nullptr;  // the input, kept alive by the trainer until backward
    // Per row: the max m and log(sum exp(x - m)), kept apart because a float m + log(...)
    // would round away the softmax's precision when logits are large.
    tensor<float, Space> row_max;
    tensor<float, Space> log_sum;
    tensor<float, Space> target;  // [rows]: a copy, so backward needs no ctx state
    tensor<double, Space> sums;   // [2 rows]: sum of exp(x - m), then the target logit
    // Outside the host only: [rows] row losses summed for the mean, and [1] the first row
    // whose target is not a class id (the targets are not readable here).
    tensor<double, Space> row_loss;
    tensor<unsigned long long, Space> bad_row;
  };

  std::int64_t local_vocab() const noexcept { return tp_size > 0 ? vocab / tp_size : 0; }
  std::int64_t vocab_begin() const noexcept { return local_vocab() * tp_rank; }

  // logits [..., V/T] (this rank's columns) and ctx.targets() of the leading shape,
  // holding ids in [0, V) -> y [1] = mean loss over rows, the same on every rank.
  template <nn::targets_context Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& logits, tensor_for<Ctx>& y, cache<space_of<Ctx>>& c) const {
    const bool dist = strata::detail::tp_active(ctx, tp_size, kind, std::string());
    const tensor_for<Ctx>& targets = ctx.targets();
    nn::detail::require_distinct(&logits, &y, kind, std::string());
    const std::int64_t classes = local_vocab(), lo = vocab_begin();
    nn::detail::require_features(logits, classes, kind, std::string(), "this rank's vocabulary slice");
    const auto& s = logits.shape();
    const std::int64_t rows = nn::detail::rows_of(s);
    if (static_cast<std::int64_t>(targets.numel()) != rows || targets.shape().rank + 1 != s.rank) [[unlikely]]
      nn::detail::fail(strata::detail::cat(kind, ": targets have shape ", targets.shape(), " for logits ", s,
                                           "; expected one class id per row of the leading shape"),
                       std::source_location::current());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      const float* tg = targets.data();
      for (std::int64_t r = 0; r < rows; ++r) {
        const float t = tg[r];
        if (!(t >= 0.0f && t < static_cast<float>(vocab) && t == std::floor(t))) [[unlikely]]
          fail_target(t, r);
      }
    }
    c.row_max.resize(nn::detail::vector_shape(rows));
    c.log_sum.resize(nn::detail::vector_shape(rows));
    c.target.resize(nn::detail::vector_shape(rows));
    c.sums.resize(nn::detail::vector_shape(2 * rows));
    y.resize(nn::detail::vector_shape(1));
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      local_terms(rows, logits.data(), targets.data(), c, [&] {
        if (dist) strata::detail::tp_all_reduce(ctx, c.row_max.span(), reduce_op::max);
      });
      if (dist) strata::detail::tp_all_reduce(ctx, c.sums.span());
      y[0] = finish(rows, c);
    } else {
      using ops = nn::detail::device_ops_for<space_of<Ctx>>;
      c.row_loss.resize(nn::detail::vector_shape(rows));
      c.bad_row.resize(nn::detail::vector_shape(1));
      // Waits for the stream: every tensor rank has the same targets, so a bad one throws
      // on all of them before any collective.
      const nn::detail::target_check bad =
          ops::vocab_cross_entropy_rows(ctx.exec(), rows, classes, vocab, logits.data(), targets.data(),
                                        c.row_max.data(), c.target.data(), c.bad_row.data());
      if (bad.row >= 0) [[unlikely]]
        fail_target(bad.value, bad.row);
      // Subtracting the global row max keeps every exp in (0, 1] on every rank.
      if (dist) strata::detail::tp_all_reduce(ctx, c.row_max.span(), reduce_op::max);
      ops::vocab_cross_entropy_sums(ctx.exec(), rows, classes, lo, logits.data(), c.row_max.data(), c.target.data(),
                                    c.sums.data());
      if (dist) strata::detail::tp_all_reduce(ctx, c.sums.span());
      ops::vocab_cross_entropy_finish(ctx.exec(), rows, c.row_max.data(), c.sums.data(), c.log_sum.data(),
                                      c.row_loss.data(), y.data());
    }
    c.logits = &logits;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>>& c) {
    (void)strata::detail::tp_active(ctx, tp_size, kind, std::string());
    nn::detail::require_forward_ran(c.logits, kind, std::string());
    nn::detail::require_dy(dy, nn::detail::vector_shape(1), kind, std::string());
    nn::detail::require_distinct(&dy, &dx, kind, std::string());
    const tensor_for<Ctx>& x = *c.logits;
    const std::int64_t classes = local_vocab(), lo = vocab_begin(), rows = nn::detail::rows_of(x.shape());
    dx.resize(x.shape());
    if constexpr (std::is_same_v<space_of<Ctx>, host>) {
      const float scale = rows ? dy[0] / static_cast<float>(rows) : 0.0f;
      const float *xp = x.data(), *mp = c.row_max.data(), *lp = c.log_sum.data(), *tg = c.target.data();
      float* dxp = dx.data();
      nn::detail::for_rows(rows, classes, [&](std::int64_t r) {
        const float* xr = xp + r * classes;
        float* dr = dxp + r * classes;
        const float m = mp[r], l = lp[r];
#pragma omp simd
        for (std::int64_t j = 0; j < classes; ++j) dr[j] = scale * std::exp((xr[j] - m) - l);
        const std::int64_t t = static_cast<std::int64_t>(tg[r]) - lo;
        if (t >= 0 && t < classes) dr[t] -= scale;
      });
    } else {
      // dy[0] is read by the kernel: the loss scale stays on the device.
      nn::detail::device_ops_for<space_of<Ctx>>::vocab_cross_entropy_backward(
          ctx.exec(), rows, classes, lo, x.data(), c.row_max.data(), c.log_sum.data(), c.target.data(), dy.data(),
          dx.data());
    }
  }

 private:
  static constexpr const char* kind = "vocab_parallel_cross_entropy";

  // The host's loops, outside the templates: the local row maxima and target copies, then
  // (after reduce_max has made the maxima global) the local sums of exponentials and the
  // target logits this rank holds.
  template <class ReduceMax>
  void local_terms(std::int64_t rows, const float* xp, const float* tg, cache<host>& c, ReduceMax&& reduce_max) const {
    const std::int64_t classes = local_vocab(), lo = vocab_begin();
    float *mp = c.row_max.data(), *cp = c.target.data();
    double* sp = c.sums.data();
    nn::detail::for_rows(rows, classes, [&](std::int64_t r) {
      const float* xr = xp + r * classes;
      float m = xr[0];
#pragma omp simd reduction(max : m)
      for (std::int64_t j = 0; j < classes; ++j) m = xr[j] > m ? xr[j] : m;
      mp[r] = m;
      cp[r] = tg[r];
    });
    // Subtracting the global row max keeps every exp in (0, 1] on every rank.
    reduce_max();
    nn::detail::for_rows(rows, classes, [&](std::int64_t r) {
      const float* xr = xp + r * classes;
      const float m = mp[r];
      double se = 0.0;
#pragma omp simd reduction(+ : se)
      for (std::int64_t j = 0; j < classes; ++j) se += std::exp(xr[j] - m);
      const std::int64_t t = static_cast<std::int64_t>(cp[r]) - lo;
      sp[r] = se;
      sp[rows + r] = (t >= 0 && t < classes) ? static_cast<double>(xr[t]) : 0.0;
    });
  }

  // The mean loss from the global sums, filling log_sum.
  static float finish(std::int64_t rows, cache<host>& c) {
    const float* mp = c.row_max.data();
    float* lp = c.log_sum.data();
    const double* sp = c.sums.data();
    double total = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const double ls = std::log(sp[r]);
      lp[r] = static_cast<float>(ls);
      total += (static_cast<double>(mp[r]) - sp[rows + r]) + ls;
    }
    return rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.0f;
  }

  [[noreturn]] void fail_target(float t, std::int64_t r) const {
    nn::detail::fail<error>(
        strata::detail::cat(kind, ": target ", t, " at row ", r, " is not a class id in [0, ", vocab, ")"),
        std::source_location::current());
  }
};

// ---- factories: check divisibility and declare each param's slice of the full tensor ----

inline column_parallel_linear make_column_parallel_linear(int in_features, int out_features, int tp_rank, int tp_size,
                                                          bool bias = true, bool gather_output = false) {
  expects<config_error>(in_features > 0, strata::detail::cat("column_parallel_linear: ", in_features,
                                                             " input features (must be positive)"));
  const auto s =
      strata::detail::make_tp_slice("column_parallel_linear", out_features, "output features", tp_rank, tp_size);
  column_parallel_linear l;
  // torch.nn.Linear's init (uniform in +-1/sqrt(in)), drawn over the full weight.
  l.weight = param<float>(shape{s.per_rank, in_features},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.weight.shard_of(shape{out_features, in_features}, 0, s.begin());
  l.bias = param<float>(bias ? shape{s.per_rank} : shape{0}, init_spec::zeros());
  if (bias) l.bias.shard_of(shape{out_features}, 0, s.begin());
  l.gather_output = gather_output;
  l.tp_rank = tp_rank;
  l.tp_size = tp_size;
  return l;
}

inline row_parallel_linear make_row_parallel_linear(int in_features, int out_features, int tp_rank, int tp_size,
                                                    bool bias = true) {
  expects<config_error>(out_features > 0, strata::detail::cat("row_parallel_linear: ", out_features,
                                                              " output features (must be positive)"));
  const auto s = strata::detail::make_tp_slice("row_parallel_linear", in_features, "input features", tp_rank, tp_size);
  row_parallel_linear l;
  l.weight = param<float>(shape{out_features, s.per_rank},
                          init_spec::uniform(1.0f / std::sqrt(static_cast<float>(in_features))));
  l.weight.shard_of(shape{out_features, in_features}, 1, s.begin());
  l.bias = param<float>(bias ? shape{out_features} : shape{0}, init_spec::zeros());
  l.tp_rank = tp_rank;
  l.tp_size = tp_size;
  return l;
}

// torch.nn.Embedding initialises with N(0, 1); GPT-style models usually pass 0.02.
inline vocab_parallel_embedding make_vocab_parallel_embedding(int vocab, int dim, int tp_rank, int tp_size,
                                                              float init_stddev = 1.0f) {
  expects<config_error>(dim > 0, strata::detail::cat("vocab_parallel_embedding: dim ", dim, " must be positive"));
  expects<config_error>(vocab <= (1 << 24), strata::detail::cat("vocab_parallel_embedding: vocab ", vocab,
                                                                " exceeds 2^24, above which float ids are not exact"));
  const auto s =
      strata::detail::make_tp_slice("vocab_parallel_embedding", vocab, "vocabulary entries", tp_rank, tp_size);
  vocab_parallel_embedding e;
  e.weight = param<float>(shape{s.per_rank, dim}, init_spec::normal(init_stddev));
  e.weight.shard_of(shape{vocab, dim}, 0, s.begin());
  e.tp_rank = tp_rank;
  e.tp_size = tp_size;
  return e;
}

inline vocab_parallel_cross_entropy make_vocab_parallel_cross_entropy(int vocab, int tp_rank, int tp_size) {
  expects<config_error>(vocab <= (1 << 24), strata::detail::cat("vocab_parallel_cross_entropy: vocab ", vocab,
                                                                " exceeds 2^24, above which float ids are not exact"));
  const auto s =
      strata::detail::make_tp_slice("vocab_parallel_cross_entropy", vocab, "vocabulary entries", tp_rank, tp_size);
  return vocab_parallel_cross_entropy{vocab, s.rank, s.size};
}

}  // namespace strata::parallel
