// The argument checks every communicator makes before a reduce-scatter or an all-gather,
// with one wording: the caller's counts, what they should be, and the communicator.
#pragma once
#include <cstddef>
#include <string>

#include "../../core/error.hpp"

namespace strata::detail {

// reduce_scatter: `in` holds one block of `out`'s size per rank.
inline void check_reduce_scatter_sizes(std::size_t in, std::size_t out, int size, const std::string& comm) {
  const std::size_t p = static_cast<std::size_t>(size);
  expects<comm_error>(in == out * p, [&] {
    return cat("reduce_scatter on ", comm, ": input has ", in, " elements, expected out (", out, ") x size (", p,
               ") = ", out * p);
  });
}

// all_gather (and its forms, named by `op`): `out` holds one block of `in`'s size per rank.
inline void check_all_gather_sizes(std::size_t in, std::size_t out, int size, const std::string& comm,
                                   const char* op = "all_gather") {
  const std::size_t p = static_cast<std::size_t>(size);
  expects<comm_error>(out == in * p, [&] {
    return cat(op, " on ", comm, ": output has ", out, " elements, expected in (", in, ") x size (", p, ") = ", in * p);
  });
}

}  // namespace strata::detail
