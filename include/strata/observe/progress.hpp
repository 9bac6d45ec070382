// The one-line progress report of a training step, as rank 0 prints it.
#pragma once
#include <cstdio>
#include <string>

#include "../train/report.hpp"

namespace strata {

// With tokens_per_sample (a language model's sequence length) the rate is in tokens/s.
inline std::string progress_line(const step_stats& s, long total_steps, double tokens_per_sample = 0) {
  char line[256];
  const bool tokens = tokens_per_sample > 0;
  std::snprintf(line, sizeof line,
                "step %4ld/%ld  loss %.6f  grad_norm %.4e  lr %.3e  scale %g  %9.4g %s/s  %d threads%s", s.step,
                total_steps, static_cast<double>(s.loss), s.grad_norm, static_cast<double>(s.lr),
                static_cast<double>(s.loss_scale), tokens ? s.samples_per_s * tokens_per_sample : s.samples_per_s,
                tokens ? "tokens" : "samples", s.host_threads, s.skipped ? "  [skipped: non-finite gradients]" : "");
  return line;
}

}  // namespace strata
