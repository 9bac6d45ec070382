// The sharding policies a trainer composes: replicated (plain data parallel) and
// zero<1|2|3>, optionally with offload_optimizer. Empty tag types, checked at compile time.
#pragma once
#include <concepts>
#include <type_traits>

namespace strata {

// Option for zero<S, ...> (stages 1-3): fp32 master weights and optimizer
// moments live in (pinned) host memory and are stepped on the host.
struct offload_optimizer {};

namespace detail {
template <class... Options>
inline constexpr bool has_offload = (std::is_same_v<Options, offload_optimizer> || ...);
template <class O>
inline constexpr bool is_known_option = std::is_same_v<O, offload_optimizer>;
}  // namespace detail

// Every rank keeps everything; gradients are reduce-scattered then all-gathered (= an
// all-reduce through the same path as ZeRO, so results are identical to every stage).
struct replicated {
  static constexpr int stage = 0;
  static constexpr bool offload = false;
  static constexpr const char* name = "replicated";
};

template <int Stage, class... Options>
struct zero {
  static_assert(Stage >= 1 && Stage <= 3, "strata::zero<S>: S must be 1, 2 or 3 (use strata::replicated for stage 0)");
  static_assert((detail::is_known_option<Options> && ...),
                "strata::zero<S, Options...>: the only option is strata::offload_optimizer");
  static constexpr int stage = Stage;
  static constexpr bool offload = detail::has_offload<Options...>;
  static constexpr const char* name = Stage == 1 ? "zero1" : Stage == 2 ? "zero2" : "zero3";
};

template <class S>
concept sharding_policy = requires {
  { S::stage } -> std::convertible_to<int>;
  { S::offload } -> std::convertible_to<bool>;
};

}  // namespace strata
