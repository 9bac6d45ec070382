// The communicator concept that every backend (self, mpi, nccl) satisfies, and a checker
// whose static_asserts name the member a would-be communicator lacks.
#pragma once
#include <concepts>
#include <span>

#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

namespace detail {
// One concept per member, so a failure can say which one is missing. float stands for
// every comm_element: the members are templates over the element type.
template <class C>
concept comm_has_rank_size = requires(const C& c) {
  { c.rank() } -> std::same_as<int>;
  { c.size() } -> std::same_as<int>;
};
template <class C>
concept comm_has_all_reduce = requires(C& c, std::span<float> s, reduce_op op) {
  c.all_reduce(s, op);
  c.all_reduce(s);
  { c.all_reduce_async(s, op) } -> std::same_as<request>;
};
template <class C>
concept comm_has_reduce_scatter = requires(C& c, std::span<const float> in, std::span<float> out, reduce_op op) {
  c.reduce_scatter(in, out, op);
  { c.reduce_scatter_async(in, out, op) } -> std::same_as<request>;
};
template <class C>
concept comm_has_all_gather = requires(C& c, std::span<const float> in, std::span<float> out) {
  c.all_gather(in, out);
  { c.all_gather_async(in, out) } -> std::same_as<request>;
};
template <class C>
concept comm_has_broadcast = requires(C& c, std::span<float> s, int root) {
  c.broadcast(s, root);
  { c.broadcast_async(s, root) } -> std::same_as<request>;
};
template <class C>
concept comm_has_send_recv = requires(C& c, std::span<const float> in, std::span<float> out, int peer, int tag) {
  c.send(in, peer, tag);
  c.recv(out, peer, tag);
  { c.send_async(in, peer, tag) } -> std::same_as<request>;
  { c.recv_async(out, peer, tag) } -> std::same_as<request>;
};
template <class C>
concept comm_has_barrier = requires(C& c) {
  c.barrier();
  { c.barrier_async() } -> std::same_as<request>;
};
template <class C>
concept comm_has_split = requires(C& c, int color, int key) {
  { c.split(color, key) } -> std::same_as<C>;
};
}  // namespace detail

template <class C>
concept communicator =
    std::movable<C> && detail::comm_has_rank_size<C> && detail::comm_has_all_reduce<C> &&
    detail::comm_has_reduce_scatter<C> && detail::comm_has_all_gather<C> && detail::comm_has_broadcast<C> &&
    detail::comm_has_send_recv<C> && detail::comm_has_barrier<C> && detail::comm_has_split<C>;

namespace detail {
// static_assert(detail::check_communicator<C>()) reports the first missing member by name.
template <class C>
consteval bool check_communicator() {
  static_assert(std::movable<C>, "strata: not a communicator: the type must be movable");
  static_assert(comm_has_rank_size<C>, "strata: not a communicator: needs int rank() const and int size() const");
  static_assert(comm_has_all_reduce<C>,
                "strata: not a communicator: needs all_reduce(std::span<T>, reduce_op) and all_reduce_async returning "
                "strata::request");
  static_assert(comm_has_reduce_scatter<C>,
                "strata: not a communicator: needs reduce_scatter(std::span<const T>, std::span<T>, reduce_op) and "
                "reduce_scatter_async returning strata::request");
  static_assert(comm_has_all_gather<C>,
                "strata: not a communicator: needs all_gather(std::span<const T>, std::span<T>) and all_gather_async "
                "returning strata::request");
  static_assert(comm_has_broadcast<C>,
                "strata: not a communicator: needs broadcast(std::span<T>, int root) and broadcast_async returning "
                "strata::request");
  static_assert(comm_has_send_recv<C>,
                "strata: not a communicator: needs send(std::span<const T>, int, int), recv(std::span<T>, int, int) "
                "and their _async forms returning strata::request");
  static_assert(comm_has_barrier<C>, "strata: not a communicator: needs barrier() and barrier_async()");
  static_assert(comm_has_split<C>,
                "strata: not a communicator: needs split(int color, int key) returning the same type");
  return true;
}
}  // namespace detail

}  // namespace strata
