// How strata's element types and reductions map onto MPI: datatypes, operations (with
// user-defined ones for bf16/fp16), and STRATA_CHECK_MPI, which turns return codes into comm_error.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "detail/reduce_math.hpp"
#include "reduce_op.hpp"

namespace strata::detail {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return cat("MPI error code ", code);
  return std::string(text, static_cast<std::size_t>(len));
}

inline void check_mpi(int code, const char* call, const std::source_location& loc) {
  if (code != MPI_SUCCESS) [[unlikely]]
    throw comm_error(cat(call, " failed: ", mpi_error_string(code), " [", where(loc), "]"));
}

}  // namespace strata::detail

// Throws strata::comm_error naming the call, MPI's error text, file and line.
#define STRATA_CHECK_MPI(call) ::strata::detail::check_mpi((call), #call, std::source_location::current())

namespace strata::detail {

// bf16 and fp16 travel as 16-bit words; the ops below give them their arithmetic. Each
// pairwise step reduces in float and rounds to nearest even.
template <class H, class F>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  H* b = static_cast<H*>(inout);
  combine<H, F>(b, static_cast<const H*>(in), b, static_cast<std::size_t>(*len));
}

// Created once, on first use after MPI_Init; MPI_Finalize releases them.
struct mpi_half_types {
  MPI_Datatype bf16_type = MPI_DATATYPE_NULL, fp16_type = MPI_DATATYPE_NULL;
  MPI_Op bf16_ops[3]{}, fp16_ops[3]{};  // sum, max, min

  static const mpi_half_types& get() {
    static const mpi_half_types t = [] {
      mpi_half_types r;
      make_type(r.bf16_type, "strata_bf16");
      make_type(r.fp16_type, "strata_fp16");
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<bf16, f_sum>, 1, &r.bf16_ops[0]));
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<bf16, f_max>, 1, &r.bf16_ops[1]));
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<bf16, f_min>, 1, &r.bf16_ops[2]));
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<fp16, f_sum>, 1, &r.fp16_ops[0]));
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<fp16, f_max>, 1, &r.fp16_ops[1]));
      STRATA_CHECK_MPI(MPI_Op_create(&half_op<fp16, f_min>, 1, &r.fp16_ops[2]));
      return r;
    }();
    return t;
  }

 private:
  static void make_type(MPI_Datatype& t, const char* name) {
    STRATA_CHECK_MPI(MPI_Type_contiguous(1, MPI_UINT16_T, &t));
    STRATA_CHECK_MPI(MPI_Type_set_name(t, name));
    STRATA_CHECK_MPI(MPI_Type_commit(&t));
  }
};

template <comm_element T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, float>)
    return MPI_FLOAT;
  else if constexpr (std::is_same_v<T, double>)
    return MPI_DOUBLE;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return MPI_INT32_T;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return MPI_INT64_T;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return MPI_UINT8_T;
  else if constexpr (std::is_same_v<T, std::uint64_t>)
    return MPI_UINT64_T;
  else if constexpr (std::is_same_v<T, bf16>)
    return mpi_half_types::get().bf16_type;
  else
    return mpi_half_types::get().fp16_type;
}

// The MPI operation that computes `op` over T (avg is a sum followed by a division).
template <comm_element T>
MPI_Op mpi_op(reduce_op op) {
  const int i = op == reduce_op::max ? 1 : op == reduce_op::min ? 2 : 0;
  if constexpr (std::is_same_v<T, bf16>)
    return mpi_half_types::get().bf16_ops[i];
  else if constexpr (std::is_same_v<T, fp16>)
    return mpi_half_types::get().fp16_ops[i];
  else
    return i == 1 ? MPI_MAX : i == 2 ? MPI_MIN : MPI_SUM;
}

}  // namespace strata::detail
