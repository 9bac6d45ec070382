// Loss scaling for fp16 training with DeepSpeed's DynamicLossScaler semantics (window
// growth, hysteresis, minimum), or a static scale; state saved in checkpoints.
#pragma once
#include <algorithm>
#include <cmath>

#include "../core/error.hpp"

namespace strata {

// DeepSpeed's "fp16" section: loss_scale (0 = dynamic), initial_scale_power,
// loss_scale_window, hysteresis, consecutive_hysteresis, min_loss_scale.
struct loss_scaler_options {
  float loss_scale = 0.0f;  // > 0: a static scale
  int initial_scale_power = 16;
  long loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  float min_loss_scale = 1.0f;
  float scale_factor = 2.0f;
  // DeepSpeed stops the run when an overflow happens at the minimum scale.
  bool raise_error_at_min_scale = true;
};

class loss_scaler {
 public:
  // What a checkpoint keeps to resume bitwise.
  struct state {
    float scale = 1.0f;
    long iteration = 0;
    long last_overflow_iteration = -1;
    int hysteresis_left = 1;
    friend bool operator==(const state&, const state&) = default;
  };

  explicit loss_scaler(const loss_scaler_options& o = {}) : opt_(o) {
    expects<config_error>(std::isfinite(o.loss_scale) && o.loss_scale >= 0.0f,
                          strata::cat("fp16: loss_scale must be 0 (dynamic) or > 0, got ", o.loss_scale));
    expects<config_error>(o.initial_scale_power >= 0 && o.initial_scale_power < 127,
                          strata::cat("fp16: initial_scale_power must be in [0, 127), got ", o.initial_scale_power));
    expects<config_error>(o.loss_scale_window >= 1,
                          strata::cat("fp16: loss_scale_window must be >= 1, got ", o.loss_scale_window));
    expects<config_error>(o.hysteresis >= 1, strata::cat("fp16: hysteresis must be >= 1, got ", o.hysteresis));
    expects<config_error>(std::isfinite(o.min_loss_scale) && o.min_loss_scale > 0.0f,
                          strata::cat("fp16: min_loss_scale must be > 0, got ", o.min_loss_scale));
    expects<config_error>(o.scale_factor > 1.0f, strata::cat("fp16: scale_factor must be > 1, got ", o.scale_factor));
    s_.scale = dynamic() ? std::ldexp(1.0f, o.initial_scale_power) : o.loss_scale;
    s_.hysteresis_left = o.hysteresis;
  }

  bool dynamic() const { return opt_.loss_scale == 0.0f; }
  float scale() const { return s_.scale; }
  const loss_scaler_options& options() const { return opt_; }

  // Called once per optimizer step with whether any rank's gradients overflowed;
  // returns whether the step is applied (it is skipped on overflow, static or not).
  // DeepSpeed's update_scale: an overflow spends one unit of hysteresis, and when none
  // is left divides the scale (not below the minimum); scale_window steps without an
  // overflow multiply it and restore the hysteresis.
  bool update(bool overflow) {
    if (!dynamic()) {
      ++s_.iteration;
      return !overflow;
    }
    if (overflow) {
      if (opt_.hysteresis == 1 || s_.hysteresis_left == 1) {
        expects(!(opt_.raise_error_at_min_scale && s_.scale == opt_.min_loss_scale),
                strata::cat("fp16: gradients overflowed at the minimum loss scale ", opt_.min_loss_scale, " (step ",
                            s_.iteration,
                            "); the model diverges in fp16: lower the lr, use bf16, "
                            "or set raise_error_at_min_scale = false"));
        s_.scale = std::max(s_.scale / opt_.scale_factor, opt_.min_loss_scale);
      } else {
        --s_.hysteresis_left;
      }
      s_.last_overflow_iteration = s_.iteration;
    } else {
      if (opt_.consecutive_hysteresis) s_.hysteresis_left = opt_.hysteresis;
      if ((s_.iteration - s_.last_overflow_iteration) % opt_.loss_scale_window == 0) {
        if (!opt_.consecutive_hysteresis) s_.hysteresis_left = opt_.hysteresis;
        s_.scale *= opt_.scale_factor;
      }
    }
    ++s_.iteration;
    return !overflow;
  }

  state save() const { return s_; }
  void restore(const state& s) {
    expects<checkpoint_error>(std::isfinite(s.scale) && s.scale > 0.0f && s.hysteresis_left >= 1 && s.iteration >= 0,
                              strata::cat("loss scaler state is corrupt: scale ", s.scale, ", hysteresis ",
                                          s.hysteresis_left, ", iteration ", s.iteration));
    s_ = s;
  }

 private:
  loss_scaler_options opt_;
  state s_;
};

}  // namespace strata
