// How strata's element types and reductions map onto NCCL, and STRATA_CHECK_NCCL, which
// turns an NCCL result into a comm_error with NCCL's own explanation, file and line.
#pragma once
#include <nccl.h>

#include <cstdint>
#include <source_location>
#include <string>
#include <type_traits>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../reduce_op.hpp"

namespace strata::detail {

inline std::string nccl_error_text(ncclResult_t r, ncclComm_t comm = nullptr) {
  std::string text = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += cat(" (", last, ")");
  return text;
}

inline void check_nccl(ncclResult_t r, const char* call, const std::source_location& loc) {
  if (r != ncclSuccess) [[unlikely]]
    throw comm_error(cat(call, " failed: ", nccl_error_text(r), " [", where(loc), "]"));
}

template <comm_element T>
constexpr ncclDataType_t nccl_type() {
  if constexpr (std::is_same_v<T, float>)
    return ncclFloat32;
  else if constexpr (std::is_same_v<T, double>)
    return ncclFloat64;
  else if constexpr (std::is_same_v<T, bf16>)
    return ncclBfloat16;
  else if constexpr (std::is_same_v<T, fp16>)
    return ncclFloat16;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return ncclInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return ncclInt64;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return ncclUint8;
  else
    return ncclUint64;
}

// ncclAvg divides after the sum, truncating for integers: the MPI backend's meaning.
constexpr ncclRedOp_t nccl_op(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return ncclSum;
    case reduce_op::max: return ncclMax;
    case reduce_op::min: return ncclMin;
    case reduce_op::avg: return ncclAvg;
  }
  return ncclSum;
}

}  // namespace strata::detail

// Throws strata::comm_error naming the call, NCCL's error text, file and line.
#define STRATA_CHECK_NCCL(call) ::strata::detail::check_nccl((call), #call, std::source_location::current())
