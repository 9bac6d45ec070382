// The argument checks every communicator makes before a reduce-scatter or an all-gather,
// with one wording: the caller's counts, what they should be, and the communicator.
#pragma once
#include <cstddef>
#include <span>
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

// Whether two buffers share a byte.
template <class A, class B>
bool spans_overlap(std::span<A> a, std::span<B> b) {
  const auto* a0 = reinterpret_cast<const char*>(a.data());
  const auto* b0 = reinterpret_cast<const char*>(b.data());
  return a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes();
}

// A host communicator's reduce_scatter: the sizes, and no overlap of input and output.
template <class U, class T>
void check_reduce_scatter_args(std::span<U> in, std::span<T> out, int size, const std::string& comm) {
  check_reduce_scatter_sizes(in.size(), out.size(), size, comm);
  expects<comm_error>(!spans_overlap(in, out) || out.empty(),
                      [&] { return cat("reduce_scatter on ", comm, ": input and output overlap"); });
}

// A host communicator's all_gather: the sizes, and `in` either apart from `out` or this
// rank's own block of it (gathered in place).
template <class U, class T>
void check_all_gather_args(std::span<U> in, std::span<T> out, int rank, int size, const std::string& comm) {
  check_all_gather_sizes(in.size(), out.size(), size, comm);
  const T* own = out.data() + static_cast<std::size_t>(rank) * in.size();
  expects<comm_error>(in.data() == own || !spans_overlap(in, out), [&] {
    return cat("all_gather on ", comm, ": input overlaps the output but is not block ", rank, " of it");
  });
}

// A root, destination or source names a rank of the communicator; tags are >= 0.
inline void check_peer(int r, int size, const char* what, const std::string& comm) {
  expects<comm_error>(r >= 0 && r < size,
                      [&] { return cat(what, " ", r, " on ", comm, ": not a rank of a communicator of size ", size); });
}
inline void check_tag(int tag, const std::string& comm) {
  expects<comm_error>(tag >= 0, [&] { return cat("tag ", tag, " on ", comm, ": tags must be >= 0"); });
}

}  // namespace strata::detail
