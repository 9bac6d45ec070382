// host_comm: the communicator a job's host buffers move over, chosen at start by how the
// job was launched (comm/launch.hpp): an mpi_comm under an MPI launcher, a gloo_comm for
// a job started by torchrun, Ray, Kubernetes or Slurm without MPI, or a self_comm for one
// process. One type, so the trainer and every program are compiled once for all three;
// each call is forwarded to the one it holds, and a split holds the same kind.
#pragma once
#include <chrono>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "../core/config.hpp"
#include "communicator.hpp"
#include "self.hpp"
#if STRATA_HAS_MPI
#include "mpi.hpp"
#endif
#if STRATA_HAS_GLOO
#include "gloo.hpp"
#endif

namespace strata {

class host_comm {
 public:
  using impl_type = std::variant<self_comm
#if STRATA_HAS_MPI
                                 ,
                                 mpi_comm
#endif
#if STRATA_HAS_GLOO
                                 ,
                                 gloo_comm
#endif
                                 >;

  explicit host_comm(self_comm c) : c_(std::move(c)) {}
#if STRATA_HAS_MPI
  explicit host_comm(mpi_comm c) : c_(std::move(c)) {}
#endif
#if STRATA_HAS_GLOO
  explicit host_comm(gloo_comm c) : c_(std::move(c)) {}
#endif

 private:
  // Before the members that use it: their return types are deduced from it.
  template <class F>
  decltype(auto) visit(F&& f) {
    return std::visit(std::forward<F>(f), c_);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return std::visit(std::forward<F>(f), c_);
  }

 public:
  // "self", "mpi" or "gloo": what the job runs on, for its report.
  std::string_view backend() const {
    return visit([](const auto& c) -> std::string_view {
      using C = std::remove_cvref_t<decltype(c)>;
      if constexpr (std::is_same_v<C, self_comm>)
        return "self";
#if STRATA_HAS_GLOO
      else if constexpr (std::is_same_v<C, gloo_comm>)
        return "gloo";
#endif
      else
        return "mpi";
    });
  }
  // The communicator held, where it is of type C (an MPI device communicator needs the
  // mpi_comm underneath); nullptr otherwise.
  template <class C>
  C* get_if() noexcept {
    return std::get_if<C>(&c_);
  }

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

  // The blocking forms are the held communicator's own (MPI runs an idle lane's
  // collective on the caller's thread; a single process's recv fails rather than waits).
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
  host_comm split(int color, int key) {
    return visit([&](auto& c) { return host_comm(c.split(color, key)); });
  }

 private:
  impl_type c_;
};

static_assert(communicator<host_comm>);

}  // namespace strata
