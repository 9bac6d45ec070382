// device_comm: the communicator a GPU trainer moves device buffers with, chosen at run
// time by STRATA_DEVICE_COMM (comm/device_comm_kind.hpp): an nccl_comm, or an
// mpi_device_comm in a build with MPI. One type, so a trainer, its layers' tensor group
// and its pipeline links are compiled once for both; each call is forwarded to the one
// it holds.
#pragma once
#include <cuda_runtime_api.h>

#include <chrono>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "../core/config.hpp"
#include "comm_forms.hpp"
#include "communicator.hpp"
#include "device_comm_kind.hpp"
#include "nccl.hpp"
#if STRATA_HAS_MPI
#include "mpi.hpp"
#include "mpi_device.hpp"
#endif

namespace strata {

class device_comm : public comm_forms<device_comm> {
 public:
#if STRATA_HAS_MPI
  using impl_type = std::variant<nccl_comm, mpi_device_comm>;
#else
  using impl_type = std::variant<nccl_comm>;
#endif

  explicit device_comm(nccl_comm c) : c_(std::move(c)) {}

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
#if STRATA_HAS_MPI
  explicit device_comm(mpi_device_comm c) : c_(std::move(c)) {}
#endif

  // Collective over `host`: a device communicator of `kind` over the same processes,
  // ordered against `compute`. NCCL first checks over `host` that no two ranks share a GPU.
  template <class HostComm>
  static device_comm over(HostComm& host, device_comm_kind kind, cudaStream_t compute, std::string name) {
#if STRATA_HAS_MPI
    if (kind == device_comm_kind::mpi) {
      mpi_comm* m = nullptr;
      if constexpr (std::is_same_v<HostComm, mpi_comm>)
        m = &host;
      else if constexpr (requires { host.template get_if<mpi_comm>(); })
        m = host.template get_if<mpi_comm>();
      if (m) return device_comm(mpi_device_comm(*m, {.compute_stream = compute, .name = std::move(name)}));
    }
#endif
    expects<config_error>(kind == device_comm_kind::nccl, [&] {
      return cat("device communicator ", name, ": STRATA_DEVICE_COMM=", name_of(kind),
                 " needs an MPI host communicator (the job started under MPI, in a build with MPI)");
    });
    nccl_options o;
    o.compute_stream = compute;
    o.name = std::move(name);
    return device_comm(nccl_comm(host, std::move(o)));
  }

  device_comm_kind kind() const noexcept { return c_.index() == 0 ? device_comm_kind::nccl : device_comm_kind::mpi; }
  int rank() const {
    return visit([](auto& c) { return c.rank(); });
  }
  int size() const {
    return visit([](auto& c) { return c.size(); });
  }
  int device() const {
    return visit([](auto& c) { return c.device(); });
  }
  cudaStream_t compute_stream() const {
    return visit([](auto& c) { return c.compute_stream(); });
  }
  void set_compute_stream(cudaStream_t s) {
    visit([&](auto& c) { c.set_compute_stream(s); });
  }
  const std::string& name() const {
    return visit([](auto& c) -> const std::string& { return c.name(); });
  }
  void set_name(std::string n) {
    visit([&](auto& c) { c.set_name(std::move(n)); });
  }
  std::chrono::duration<double> timeout() const {
    return visit([](auto& c) { return c.timeout(); });
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
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_from_host_async(std::span<U> in, std::span<T> out) {
    return visit([&](auto& c) { return c.all_gather_from_host_async(in, out); });
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
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request send_recv_async(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    return visit([&](auto& c) { return c.send_recv_async(out, dest, in, src, tag); });
  }
  request barrier_async() {
    return visit([](auto& c) { return c.barrier_async(); });
  }
  void barrier() {
    visit([](auto& c) { c.barrier(); });
  }
  void synchronize() {
    visit([](auto& c) { c.synchronize(); });
  }
  device_comm split(int color, int key) {
    return visit([&](auto& c) { return device_comm(c.split(color, key)); });
  }

  // For comm_forms: the held communicator's own blocking mode, where it has one.
  template <class Launch>
  void run_blocking(Launch& launch) {
    visit([&](auto& c) {
      if constexpr (requires { c.run_blocking(launch); })
        c.run_blocking(launch);
      else
        launch().wait();
    });
  }

 private:
  impl_type c_;
};

static_assert(communicator<device_comm>);

}  // namespace strata
