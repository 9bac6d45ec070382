// STRATA_CHECK_CUDA: turns a CUDA runtime return code into a strata::cuda_error that
// names the call, CUDA's error name and text, and the file and line of the check.
#pragma once
#include <cuda_runtime_api.h>

#include <source_location>
#include <string>

#include "../../core/error.hpp"

namespace strata::detail {

inline std::string cuda_error_text(cudaError_t code) {
  return cat(cudaGetErrorName(code), " (", cudaGetErrorString(code), ")");
}

inline void check_cuda(cudaError_t code, const char* call, const std::source_location& loc) {
  if (code != cudaSuccess) [[unlikely]] {
    // Reset the runtime's last error (a non-sticky one) so a later, unrelated check
    // that reads it does not report this failure a second time.
    (void)cudaGetLastError();
    throw cuda_error(cat(call, " failed: ", cuda_error_text(code), " [", where(loc), "]"));
  }
}

// Before a kernel launch: drops an error an earlier call left behind and nobody read (a
// call whose code was ignored on purpose, such as restoring a device in a destructor), so
// the check after the launch reports the launch's own error, not an older one. A sticky
// error (a broken context) fails the launch itself and is reported there.
inline void clear_stale_cuda_error() noexcept { (void)cudaGetLastError(); }

// A stream or event query's answer: true when finished, false for cudaErrorNotReady,
// else throws. NotReady is an answer, not a failure, yet the runtime records it as the
// last error; CUB reads that slot after its own launches and would report a stale
// NotReady as its failure, so it is dropped here (PyTorch's stream query does the same).
inline bool query_finished(cudaError_t code, const char* call,
                           const std::source_location& loc = std::source_location::current()) {
  if (code == cudaErrorNotReady) {
    clear_stale_cuda_error();
    return false;
  }
  check_cuda(code, call, loc);
  return true;
}

}  // namespace strata::detail

// Throws strata::cuda_error naming the call, CUDA's error text, file and line.
#define STRATA_CHECK_CUDA(call) ::strata::detail::check_cuda((call), #call, std::source_location::current())
