// Reduction operations and the element types every communicator moves: the vocabulary
// shared by the self, MPI and (later) NCCL backends.
#pragma once
#include <concepts>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "../core/dtype.hpp"

namespace strata {

// avg is sum / size, computed after the sum (in the element type, so integers truncate).
enum class reduce_op : std::uint8_t { sum, max, min, avg };

constexpr std::string_view name_of(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::max: return "max";
    case reduce_op::min: return "min";
    case reduce_op::avg: return "avg";
  }
  return "?";
}

// The element types communicators accept. bf16/fp16 reduce in float per pairwise step and
// round to nearest even, which is what NCCL does for them too.
template <class T>
concept comm_element = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, bf16> ||
                       std::same_as<T, fp16> || std::same_as<T, std::int32_t> || std::same_as<T, std::int64_t> ||
                       std::same_as<T, std::uint8_t> || std::same_as<T, std::uint64_t>;

}  // namespace strata
