// Learning-rate schedules with DeepSpeed's semantics (WarmupLR, WarmupDecayLR,
// WarmupCosineLR) and a constant rate, chosen at run time (e.g. from a JSON config).
#pragma once
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace strata {

// lr(k) is the rate of the k-th update, counted from 0: a trainer's steps skipped for
// non-finite gradients do not advance it, as DeepSpeed's engine does not step its
// scheduler on an overflow (train/detail/trainer_body.hpp). It is DeepSpeed's get_lr() with
// last_batch_iteration = k. (DeepSpeed itself applies its constructor's value to the
// first step and steps the scheduler after each optimizer step, so its step k + 1 uses
// the value strata gives step k; strata does not repeat the first value.)
//   constant       : base_lr
//   linear_warmup  : WarmupLR: warmup_min_lr -> warmup_max_lr over warmup_num_steps
//                    ("log": gamma = ln(k + 1) / ln(N), "linear": gamma = k / N), then max
//   warmup_decay   : WarmupDecayLR: the same warmup, then gamma = (T - k) / (T - N), >= 0
//   warmup_cosine  : WarmupCosineLR: base_lr times a ratio that warms up from
//                    warmup_min_ratio to 1, then follows a half cosine to cos_min_ratio
//                    at total_num_steps and stays there
// where N = max(2, warmup_num_steps) and T = total_num_steps, as in DeepSpeed.
struct lr_schedule {
  enum class kind { constant, linear_warmup, warmup_decay, warmup_cosine };
  enum class warmup_curve { log, linear };

  kind type = kind::constant;
  double base_lr = 1e-3;         // constant, warmup_cosine (the optimizer's lr)
  double warmup_min_lr = 0.0;    // linear_warmup, warmup_decay
  double warmup_max_lr = 1e-3;   // linear_warmup, warmup_decay
  long warmup_num_steps = 1000;  // all but constant
  long total_num_steps = 0;      // warmup_decay, warmup_cosine
  warmup_curve warmup_type = warmup_curve::log;
  double warmup_min_ratio = 0.0;  // warmup_cosine
  double cos_min_ratio = 1e-4;    // warmup_cosine

  static lr_schedule constant(double lr) {
    lr_schedule s;
    s.base_lr = lr;
    s.validate();
    return s;
  }
  static lr_schedule linear_warmup(double min_lr, double max_lr, long warmup_steps,
                                   warmup_curve curve = warmup_curve::log) {
    lr_schedule s;
    s.type = kind::linear_warmup;
    s.warmup_min_lr = min_lr;
    s.warmup_max_lr = max_lr;
    s.warmup_num_steps = warmup_steps;
    s.warmup_type = curve;
    s.validate();
    return s;
  }
  static lr_schedule warmup_decay(double min_lr, double max_lr, long warmup_steps, long total_steps,
                                  warmup_curve curve = warmup_curve::log) {
    lr_schedule s = linear_warmup(min_lr, max_lr, warmup_steps, curve);
    s.type = kind::warmup_decay;
    s.total_num_steps = total_steps;
    s.validate();
    return s;
  }
  static lr_schedule warmup_cosine(double lr, long total_steps, long warmup_steps, double warmup_min_ratio = 0.0,
                                   double cos_min_ratio = 1e-4, warmup_curve curve = warmup_curve::log) {
    lr_schedule s;
    s.type = kind::warmup_cosine;
    s.base_lr = lr;
    s.total_num_steps = total_steps;
    s.warmup_num_steps = warmup_steps;
    s.warmup_min_ratio = warmup_min_ratio;
    s.cos_min_ratio = cos_min_ratio;
    s.warmup_type = curve;
    s.validate();
    return s;
  }

  // DeepSpeed's names: "log" or "linear".
  static warmup_curve parse_warmup_type(std::string_view s) {
    if (s == "log") return warmup_curve::log;
    if (s == "linear") return warmup_curve::linear;
    throw config_error(strata::cat("lr schedule: warmup_type must be \"log\" or \"linear\", got \"", s, "\""));
  }

  // Throws config_error naming the first field that cannot work.
  void validate() const {
    auto rate = [](const char* field, double v) {
      expects<config_error>(std::isfinite(v) && v >= 0.0,
                            strata::cat("lr schedule: ", field, " must be finite and >= 0, got ", v));
    };
    auto ratio = [](const char* field, double v) {
      expects<config_error>(v >= 0.0 && v <= 1.0,
                            [&] { return strata::cat("lr schedule: ", field, " must be in [0, 1], got ", v); });
    };
    switch (type) {
      case kind::constant: rate("lr", base_lr); return;
      case kind::warmup_decay:
        expects<config_error>(total_num_steps > 0,
                              strata::cat("lr schedule: total_num_steps must be > 0, got ", total_num_steps));
        [[fallthrough]];
      case kind::linear_warmup:
        rate("warmup_min_lr", warmup_min_lr);
        rate("warmup_max_lr", warmup_max_lr);
        expects<config_error>(warmup_num_steps > 0,
                              strata::cat("lr schedule: warmup_num_steps must be > 0, got ", warmup_num_steps));
        return;
      case kind::warmup_cosine:
        rate("lr", base_lr);
        expects<config_error>(total_num_steps > 0,
                              strata::cat("lr schedule: total_num_steps must be > 0, got ", total_num_steps));
        expects<config_error>(warmup_num_steps > 0,
                              strata::cat("lr schedule: warmup_num_steps must be > 0, got ", warmup_num_steps));
        ratio("warmup_min_ratio", warmup_min_ratio);
        ratio("cos_min_ratio", cos_min_ratio);
        return;
    }
  }

  // The rate of optimizer step `step` (0 = the first step).
  float lr(long step) const {
    expects<config_error>(step >= 0, [&] { return strata::cat("lr schedule: step counts from 0, got ", step); });
    const double k = static_cast<double>(step);
    const long n = std::max(2L, warmup_num_steps);
    const double nd = static_cast<double>(n);
    auto warmup_gamma = [&] { return warmup_type == warmup_curve::log ? std::log(k + 1.0) / std::log(nd) : k / nd; };
    switch (type) {
      case kind::constant: return static_cast<float>(base_lr);
      case kind::linear_warmup: {
        const double gamma = step < n ? warmup_gamma() : 1.0;
        return static_cast<float>(warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma);
      }
      case kind::warmup_decay: {
        const double gamma = step < n ? warmup_gamma()
                                      : std::max(0.0, static_cast<double>(total_num_steps - step) /
                                                          std::max(1.0, static_cast<double>(total_num_steps - n)));
        return static_cast<float>(warmup_min_lr + (warmup_max_lr - warmup_min_lr) * gamma);
      }
      case kind::warmup_cosine: {
        double r;
        if (step < n) {
          r = warmup_min_ratio + warmup_gamma() * (1.0 - warmup_min_ratio);
        } else {
          const double real_last = static_cast<double>(step - n + 1);
          const double real_total = static_cast<double>(std::max(1L, total_num_steps - n));
          const double progress = std::min(1.0, real_last / real_total);
          r = std::max(0.0,
                       cos_min_ratio + (1.0 - cos_min_ratio) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0);
        }
        return static_cast<float>(base_lr * r);
      }
    }
    return 0.0f;
  }
};

}  // namespace strata
