// Argument checks on the hot path of communication calls: the message is built only when
// the check fails, so a passing check costs one comparison, not a formatted string.
#pragma once
#include <concepts>
#include <source_location>
#include <string>

#include "../../core/error.hpp"

namespace strata::detail {

template <class E, class F>
requires std::invocable<F&>
inline void check(bool cond, F&& message, const std::source_location loc = std::source_location::current()) {
  if (!cond) [[unlikely]]
    throw E(std::string(message()) + " [" + where(loc) + "]");
}

}  // namespace strata::detail
