// The exception hierarchy of strata: every host-side failure is a strata::error whose
// message says what was wrong, where, and what to do about it.
#pragma once
#include <cstring>
#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace strata {

class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// A configuration the library cannot run: bad grid, bad option, bad JSON key.
class config_error : public error {
 public:
  using error::error;
};
// A failed or timed-out collective, a bad rank, a failed rendezvous.
class comm_error : public error {
 public:
  using error::error;
};
// A CUDA runtime / cuBLAS / NCCL failure, or no usable device.
class cuda_error : public error {
 public:
  using error::error;
};
// A checkpoint or weight file that is missing, corrupt or of another model.
class checkpoint_error : public error {
 public:
  using error::error;
};

// Builds a message from stream-able pieces: strata::cat("grid ", tp, "x", dp).
template <class... Args>
std::string cat(Args&&... args) {
  std::ostringstream os;
  if constexpr (sizeof...(Args) > 0) (os << ... << std::forward<Args>(args));
  return os.str();
}

namespace detail {

// The text of an errno value, for messages about failed system calls.
inline std::string errno_text(int e) { return std::strerror(e); }

inline std::string where(const std::source_location& loc) {
  std::string file = loc.file_name();
  if (auto pos = file.rfind("include/strata/"); pos != std::string::npos) file = file.substr(pos + 8);
  return cat(file, ":", loc.line());
}

}  // namespace detail

// Throws E with the message unless cond holds. The location is the caller's, so a
// message points at the check that failed rather than at this helper. The message is
// a string literal, or a callable returning the string, so a check that passes costs
// nothing: `expects(ok, [&] { return cat("bad ", n); })`. (A std::string built
// at the call site is accepted too, but is built even when the check passes: keep
// that form off hot paths.)
template <class E = error, class Message>
inline void expects(bool cond, Message&& message, const std::source_location loc = std::source_location::current()) {
  if (cond) [[likely]]
    return;
  std::string text;
  if constexpr (std::is_invocable_v<Message>)
    text = std::string(message());
  else
    text = std::string(message);
  throw E(text + " [" + detail::where(loc) + "]");
}

}  // namespace strata
