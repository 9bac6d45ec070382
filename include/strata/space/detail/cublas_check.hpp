// STRATA_CHECK_CUBLAS: turns a cuBLAS status into a strata::cuda_error that names the
// call, cuBLAS's status name and text, and the file and line of the check.
#pragma once
#include <cublas_v2.h>

#include <source_location>

#include "../../core/error.hpp"

namespace strata::detail {

// The math mode of every strata cuBLAS handle: no TF32 (fp32 GEMMs keep the host's
// numbers), and no split-K partial sums rounded to a 16-bit C (a 16-bit output is
// rounded once, from the fp32 accumulator, as the host does).
inline constexpr cublasMath_t cublas_math_mode =
    static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);

inline void check_cublas(cublasStatus_t code, const char* call, const std::source_location& loc) {
  if (code != CUBLAS_STATUS_SUCCESS) [[unlikely]]
    throw cuda_error(
        cat(call, " failed: ", cublasGetStatusName(code), " (", cublasGetStatusString(code), ") [", where(loc), "]"));
}

}  // namespace strata::detail

// Throws strata::cuda_error naming the call, cuBLAS's status text, file and line.
#define STRATA_CHECK_CUBLAS(call) ::strata::detail::check_cublas((call), #call, std::source_location::current())
