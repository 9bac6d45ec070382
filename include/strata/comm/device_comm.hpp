// device_comm: the communicator a GPU trainer moves device buffers with, chosen at run
// time by STRATA_DEVICE_COMM (comm/device_comm_kind.hpp): an nccl_comm, or an
// mpi_device_comm in a build with MPI. One type, so a trainer, its layers' tensor group
// and its pipeline links are compiled once for both; each call is forwarded to the one
// it holds.
#pragma once
#include <cuda_runtime_api.h>

#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>

#include "../core/config.hpp"
#include "communicator.hpp"
#include "detail/held_comm.hpp"
#include "device_comm_kind.hpp"
#include "nccl.hpp"
#if STRATA_HAS_MPI
#include "mpi.hpp"
#include "mpi_device.hpp"
#endif

namespace strata {

namespace detail {
#if STRATA_HAS_MPI
using device_comm_variant = std::variant<nccl_comm, mpi_device_comm>;
#else
using device_comm_variant = std::variant<nccl_comm>;
#endif
}  // namespace detail

class device_comm : public detail::held_comm<device_comm, detail::device_comm_variant> {
 public:
  explicit device_comm(nccl_comm c) : held_comm(std::move(c)) {}
#if STRATA_HAS_MPI
  explicit device_comm(mpi_device_comm c) : held_comm(std::move(c)) {}
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
  int device() const {
    return visit([](auto& c) { return c.device(); });
  }
  cudaStream_t compute_stream() const {
    return visit([](auto& c) { return c.compute_stream(); });
  }
  void set_compute_stream(cudaStream_t s) {
    visit([&](auto& c) { c.set_compute_stream(s); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_from_host_async(std::span<U> in, std::span<T> out) {
    return visit([&](auto& c) { return c.all_gather_from_host_async(in, out); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request send_recv_async(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    return visit([&](auto& c) { return c.send_recv_async(out, dest, in, src, tag); });
  }
  void synchronize() {
    visit([](auto& c) { c.synchronize(); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void send_recv(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    visit([&](auto& c) { c.send_recv(out, dest, in, src, tag); });
  }
};

static_assert(communicator<device_comm>);

}  // namespace strata
