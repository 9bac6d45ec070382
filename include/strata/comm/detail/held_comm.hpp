// held_comm: a communicator that holds one of several backends (host_comm, device_comm),
// written once: each operation is forwarded to the one it holds, and a split holds the
// same kind. The blocking forms are the held communicator's own (MPI runs an idle lane's
// collective on the caller's thread, NCCL queues on the compute stream, a single
// process's recv fails rather than waits).
#pragma once
#include <chrono>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "../reduce_op.hpp"
#include "../request.hpp"

namespace strata::detail {

template <class Derived, class Variant>
class held_comm {
 public:
  using impl_type = Variant;

 protected:
  // Before the members that use it: return types are deduced from it.
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), c_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), c_);
  }

 public:
  int rank() const {
    return visit([](const auto& c) { return c.rank(); });
  }
  int size() const {
    return visit([](const auto& c) { return c.size(); });
  }
  const std::string& name() const {
    return visit([](const auto& c) -> const std::string& { return c.name(); });
  }
  void set_name(std::string n) {
    visit([&](auto& c) { c.set_name(std::move(n)); });
  }
  std::chrono::duration<double> timeout() const {
    return visit([](const auto& c) { return c.timeout(); });
  }
  void set_timeout(std::chrono::duration<double> t) {
    visit([&](auto& c) { c.set_timeout(t); });
  }
  // The communicator held, where it is of type C (an MPI device communicator needs the
  // mpi_comm underneath); nullptr otherwise.
  template <class C>
  C* get_if() noexcept {
    return std::get_if<C>(&c_);
  }

  template <comm_element T>
  request all_reduce_async(std::span<T> data, reduce_op op = reduce_op::sum) {
    return visit([&](auto& c) { return c.all_reduce_async(data, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request reduce_scatter_async(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    return visit([&](auto& c) { return c.reduce_scatter_async(in, out, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_async(std::span<U> in, std::span<T> out) {
    return visit([&](auto& c) { return c.all_gather_async(in, out); });
  }
  template <comm_element T>
  request broadcast_async(std::span<T> data, int root) {
    return visit([&](auto& c) { return c.broadcast_async(data, root); });
  }
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  request send_async(std::span<U> data, int dest, int tag = 0) {
    return visit([&](auto& c) { return c.send_async(data, dest, tag); });
  }
  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    return visit([&](auto& c) { return c.recv_async(data, src, tag); });
  }
  request barrier_async() {
    return visit([](auto& c) { return c.barrier_async(); });
  }

  template <comm_element T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) {
    visit([&](auto& c) { c.all_reduce(data, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void reduce_scatter(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    visit([&](auto& c) { c.reduce_scatter(in, out, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void all_gather(std::span<U> in, std::span<T> out) {
    visit([&](auto& c) { c.all_gather(in, out); });
  }
  template <comm_element T>
  void broadcast(std::span<T> data, int root) {
    visit([&](auto& c) { c.broadcast(data, root); });
  }
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  void send(std::span<U> data, int dest, int tag = 0) {
    visit([&](auto& c) { c.send(data, dest, tag); });
  }
  template <comm_element T>
  void recv(std::span<T> data, int src, int tag = 0) {
    visit([&](auto& c) { c.recv(data, src, tag); });
  }
  void barrier() {
    visit([](auto& c) { c.barrier(); });
  }
  // Collective: ranks with the same color form a communicator of the same kind.
  Derived split(int color, int key) {
    return visit([&](auto& c) { return Derived(c.split(color, key)); });
  }

 protected:
  explicit held_comm(Variant c) : c_(std::move(c)) {}
  ~held_comm() = default;
  held_comm(held_comm&&) noexcept = default;
  held_comm& operator=(held_comm&&) noexcept = default;

  Variant c_;
};

}  // namespace strata::detail
