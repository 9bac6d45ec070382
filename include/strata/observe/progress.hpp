// The one-line progress report of a training step, as rank 0 prints it.
#pragma once
#include <cstdio>
#include <string>

#include "../train/report.hpp"

namespace strata {

inline std::string progress_line(const step_stats& s, long total_steps) {
  char line[256];
  std::snprintf(line, sizeof line, "step %4ld/%ld  loss %.6f  grad_norm %.4e  lr %.3e  scale %g  %9.0f samples/s%s",
                s.step, total_steps, static_cast<double>(s.loss), s.grad_norm, static_cast<double>(s.lr),
                static_cast<double>(s.loss_scale), s.samples_per_s,
                s.skipped ? "  [skipped: non-finite gradients]" : "");
  return line;
}

}  // namespace strata
