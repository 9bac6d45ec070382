// The row functors of softmax cross-entropy, whole (nn::softmax_cross_entropy) and split
// by vocabulary over tensor ranks (nn::vocab_parallel_cross_entropy), for any space.
#pragma once
#include <cmath>
#include <cstdint>

#include "../../core/config.hpp"
#include "../../core/dtype.hpp"
#include "../../core/math.hpp"
#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"

namespace strata::nn::detail {

// What backward and the loss need of a forward, in the layer's space. Per row, the max m
// and log(sum exp(x - m)) are kept apart: a float m + log(...) would round away the
// softmax's precision when logits are large (ulp(1e4) ~ 1e-3). The per-row statistics
// stay float (double for the losses) whatever the activations are.
template <class Space>
struct cross_entropy_stats {
  tensor<float, Space> row_max;    // [rows]
  tensor<float, Space> log_sum;    // [rows]: log(sum exp(x - max))
  tensor<float, Space> target;     // [rows]: a copy, so backward needs no ctx state
  tensor<double, Space> row_loss;  // [rows]: summed in a fixed order for the mean
  // Where the targets are not readable by the host: [1], for the id check on the device.
  tensor<unsigned long long, Space> bad_row;
  double count = 0;  // what the forward's mean divided by (label_count), for backward
};

// The statistics and the logits (the context's activations, Act) they were taken of.
template <class Space, class Act = float>
struct cross_entropy_cache : cross_entropy_stats<Space> {
  const tensor<Act, Space>* logits = nullptr;  // the input, kept alive by the trainer until backward
};

// The whole row in one pass: max, sum of exp(x - m) in double, and the row's loss
// m - x_target + log(sum), 0 for an ignored label. The targets have been checked to be
// class ids or ignore_label, or the check is deferred (a GPU trainer's step): a target
// out of range then reads nothing and gives 0, in a step that will raise the error.
// Logits of type T (float or 16-bit) are widened to float as they are read.
template <class T = float>
struct cross_entropy_rows_fn {
  const T* logits;
  const float* targets;
  float* row_max;
  float* log_sum;
  float* target_out;
  double* row_loss;
  std::int64_t classes;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = logits + r * classes;
    // Subtracting the row max keeps every exp in (0, 1]: no overflow for any logits.
    const float m = row.max(classes, [&](std::int64_t j) { return static_cast<float>(xr[j]); });
    const double se =
        row.sum(classes, [&](std::int64_t j) { return static_cast<double>(math::exp(static_cast<float>(xr[j]) - m)); });
    row.once([&] {
      const double ls = std::log(se);
      const float t = targets[r];
      row_max[r] = m;
      log_sum[r] = static_cast<float>(ls);
      target_out[r] = t;
      const bool in_range = t >= 0.0f && t < static_cast<float>(classes);
      row_loss[r] = t == ignore_label || !in_range
                        ? 0.0
                        : (static_cast<double>(m) - static_cast<float>(xr[static_cast<std::int64_t>(t)])) + ls;
    });
  }
};

// Split by vocabulary, step 1: this rank's row maxima and a copy of the targets.
template <class T = float>
struct vocab_max_rows_fn {
  const T* logits;
  const float* targets;
  float* row_max;
  float* target_out;
  std::int64_t classes;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = logits + r * classes;
    const float m = row.max(classes, [&](std::int64_t j) { return static_cast<float>(xr[j]); });
    row.once([&] {
      row_max[r] = m;
      target_out[r] = targets[r];
    });
  }
};

// Step 2, once the maxima are global: sums[r] = sum of exp(x - m) over this rank's
// columns [lo, lo + classes), sums[rows + r] = the target's logit where this rank holds
// it, else 0 (the all-reduce of both then gives every rank the whole row's).
template <class T = float>
struct vocab_sum_rows_fn {
  const T* logits;
  const float* row_max;
  const float* target;
  double* sums;
  std::int64_t rows, classes, lo;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    const T* xr = logits + r * classes;
    const float m = row_max[r];
    const double se =
        row.sum(classes, [&](std::int64_t j) { return static_cast<double>(math::exp(static_cast<float>(xr[j]) - m)); });
    row.once([&] {
      const std::int64_t t = static_cast<std::int64_t>(target[r]) - lo;
      sums[r] = se;
      sums[rows + r] = t >= 0 && t < classes ? static_cast<double>(static_cast<float>(xr[t])) : 0.0;
    });
  }
};

// Step 3, once the sums are global: each row's log-sum and loss (0 for an ignored label).
struct vocab_finish_fn {
  const float* row_max;
  const double* sums;
  const float* target;
  float* log_sum;
  double* row_loss;
  std::int64_t rows;
  STRATA_HOST_DEVICE void operator()(std::int64_t r) const {
    const double ls = std::log(sums[r]);
    log_sum[r] = static_cast<float>(ls);
    row_loss[r] = target[r] == ignore_label ? 0.0 : (static_cast<double>(row_max[r]) - sums[rows + r]) + ls;
  }
};

// The count a loss of `rows` labels divides by: what the context says (a trainer counts
// the labels that are not ignored over the whole step's batch and gives each micro-batch
// its share, so that the step's loss is the mean over those labels), else rows.
template <class Ctx>
double label_count(const Ctx& ctx, std::int64_t rows) {
  if constexpr (requires { ctx.label_count(); }) {
    if (const double c = ctx.label_count(); c >= 0.0) return c;
  }
  return static_cast<double>(rows);
}

struct row_loss_term {
  const double* row_loss;
  STRATA_HOST_DEVICE double operator()(std::int64_t i) const { return row_loss[i]; }
};

// dx = dy[0] / count * (softmax(x) - onehot(target)) on vocabulary columns [lo, lo +
// classes) (lo = 0 for the whole row), 0 on a row whose label is ignored, with dy read
// where it is: on a GPU the loss scale stays on the device. The target is compared,
// never used as an index. Logits and dx are of type T (the context's activations), the
// softmax computed in float and each dx rounded once; dy (the loss's gradient) is float.
template <class T = float>
struct softmax_grad_rows_fn {
  const T* logits;
  const float* row_max;
  const float* log_sum;
  const float* target;
  const float* dy;
  T* dx;
  float count;  // the labels the loss is the mean over (see label_count)
  std::int64_t classes, lo;
  template <class Row>
  STRATA_HOST_DEVICE STRATA_FORCEINLINE void operator()(const Row& row, std::int64_t r) const {
    T* dr = dx + r * classes;
    if (target[r] == ignore_label) {
      row.for_each(classes, [&](std::int64_t j) { dr[j] = round_to<T>(0.0f); });
      return;
    }
    const float scale = dy[0] / count;
    const T* xr = logits + r * classes;
    const float m = row_max[r], l = log_sum[r];
    const std::int64_t t = static_cast<std::int64_t>(target[r]) - lo;
    row.for_each(classes, [&](std::int64_t j) {
      float v = scale * math::exp((static_cast<float>(xr[j]) - m) - l);
      if (j == t) v -= scale;
      dr[j] = round_to<T>(v);
    });
  }
};

}  // namespace strata::nn::detail
