// What tensor-parallel layers share: the tp_context concept, the check that a layer built
// for T ranks runs on a tensor communicator of T ranks, its collectives, and slice sizes.
#pragma once
#include <cstdint>
#include <source_location>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "../../comm/communicator.hpp"
#include "../../comm/reduce_op.hpp"
#include "../../comm/request.hpp"
#include "../../core/error.hpp"
#include "../detail/checks.hpp"

namespace strata {

// A context whose tp() is the tensor-parallel communicator of this rank (the ranks that
// hold the other slices of the same layers).
template <class Ctx>
concept tp_context = requires(Ctx& ctx) {
  requires std::is_lvalue_reference_v<decltype(ctx.tp())>;
  requires communicator<std::remove_cvref_t<decltype(ctx.tp())>>;
};

// The rank's slice of `total` items over `size` ranks; a layer that does not divide its
// items evenly is refused at construction (Megatron pads the vocab instead; we make the
// user choose).
struct tp_slice {
  int rank = 0, size = 1;
  std::int64_t per_rank = 0;
  std::int64_t begin() const noexcept { return per_rank * rank; }
};

inline tp_slice make_tp_slice(std::string_view what, std::int64_t total, std::string_view items, int rank, int size) {
  expects<config_error>(size > 0 && rank >= 0 && rank < size, [&] {
    return strata::cat(what, ": tensor-parallel rank ", rank, " is not in [0, ", size, ")");
  });
  expects<config_error>(total > 0, [&] { return strata::cat(what, ": ", total, " ", items, " (must be positive)"); });
  expects<config_error>(total % size == 0, [&] {
    return strata::cat(what, ": ", total, " ", items, " do not divide over ", size, " tensor-parallel ranks");
  });
  return {rank, size, total / size};
}

}  // namespace strata

namespace strata::nn::detail {

// Called at the top of every forward/backward: a layer that holds 1/T of a tensor must
// run with T ranks in ctx.tp(). A whole layer (T = 1) needs no communicator and does not
// ask for one (a data-parallel trainer may leave its context without one); run inside a
// tensor group it computes the whole result on each rank, which is still correct.
// Returns whether collectives are needed.
template <class Ctx>
bool tp_active(Ctx& ctx, int tp_size, std::string_view kind, const std::string& owner,
               const std::source_location loc = std::source_location::current()) {
  if (tp_size == 1) return false;
  if constexpr (tp_context<Ctx>) {
    const int have = ctx.tp().size();
    expects<config_error>(
        have == tp_size,
        [&] {
          return strata::cat(label(kind, owner), ": built for ", tp_size,
                             " tensor-parallel ranks, but the context's tensor communicator has ", have);
        },
        loc);
  } else {
    (void)ctx;
    expects<config_error>(
        false,
        [&] {
          return strata::cat(label(kind, owner), ": built for ", tp_size,
                             " tensor-parallel ranks, but the context has no tensor communicator (ctx.tp())");
        },
        loc);
  }
  return true;
}

// Collectives over ctx.tp(), only reached after tp_active() returned true (so a context
// without tp() never gets here at run time, and these compile for it as no-ops). T is
// any element type the communicators take: float, double, or the 16-bit activations.
template <class Ctx, class T>
void tp_all_reduce(Ctx& ctx, std::span<T> data, reduce_op op = reduce_op::sum) {
  if constexpr (tp_context<Ctx>) ctx.tp().all_reduce(data, op);
}
template <class Ctx, class T>
request tp_all_reduce_async(Ctx& ctx, std::span<T> data, reduce_op op = reduce_op::sum) {
  if constexpr (tp_context<Ctx>)
    return ctx.tp().all_reduce_async(data, op);
  else
    return request{};
}
template <class Ctx, class T>
void tp_all_gather(Ctx& ctx, std::type_identity_t<std::span<const T>> in, std::span<T> out) {
  if constexpr (tp_context<Ctx>) ctx.tp().all_gather(in, out);
}

}  // namespace strata::nn::detail
