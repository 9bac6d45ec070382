// Communication time-outs: STRATA_COMM_TIMEOUT, the longest one a communicator takes, and
// deadlines from now.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "../../core/error.hpp"

namespace strata::detail {

// The longest time-out: 1e8 s, about three years. Longer ones (inf among them) mean no
// time-out in practice and are held here, so that a deadline (now + the time-out, in the
// clock's 64-bit nanoseconds) cannot overflow into the past.
inline constexpr double max_comm_timeout_s = 1e8;

// `t` as a communicator takes it: positive (a config_error otherwise, NaN included), held
// at max_comm_timeout_s.
inline std::chrono::duration<double> checked_comm_timeout(std::chrono::duration<double> t) {
  expects<config_error>(t.count() > 0,
                        [&] { return cat("communicator time-out of ", t.count(), " s: must be positive"); });
  return std::min(t, std::chrono::duration<double>(max_comm_timeout_s));
}

// STRATA_COMM_TIMEOUT's value `s` in seconds ("inf" for none, in practice).
inline std::chrono::duration<double> parse_comm_timeout(const char* s) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  expects<config_error>(end && end != s && *end == '\0' && v > 0,
                        cat("STRATA_COMM_TIMEOUT=\"", s, "\" is not a positive number of seconds"));
  return checked_comm_timeout(std::chrono::duration<double>(v));
}

// The time-out for one operation, from STRATA_COMM_TIMEOUT (seconds) or 300 s. A stuck
// collective cannot be cancelled, so after this long the waiter aborts the job.
inline std::chrono::duration<double> default_comm_timeout() {
  static const std::chrono::duration<double> value = [] {
    const char* s = std::getenv("STRATA_COMM_TIMEOUT");
    return s && *s ? parse_comm_timeout(s) : std::chrono::duration<double>(300.0);
  }();
  return value;
}

// The time point `t` from now (`t` at most max_comm_timeout_s: no overflow).
inline std::chrono::steady_clock::time_point deadline_in(std::chrono::duration<double> t) {
  return std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(t);
}

}  // namespace strata::detail
