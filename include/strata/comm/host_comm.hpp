// host_comm: the communicator a job's host buffers move over, chosen at start by how the
// job was launched (comm/launch.hpp): an mpi_comm under an MPI launcher, a gloo_comm for
// a job started by torchrun, Ray, Kubernetes or Slurm without MPI, or a self_comm for one
// process. One type, so the trainer and every program are compiled once for all three;
// each call is forwarded to the one it holds, and a split holds the same kind.
#pragma once
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

#include "../core/config.hpp"
#include "communicator.hpp"
#include "detail/held_comm.hpp"
#include "self.hpp"
#if STRATA_HAS_MPI
#include "mpi.hpp"
#endif
#if STRATA_HAS_GLOO
#include "gloo.hpp"
#endif

namespace strata {

namespace detail {
using host_comm_variant = std::variant<self_comm
#if STRATA_HAS_MPI
                                       ,
                                       mpi_comm
#endif
#if STRATA_HAS_GLOO
                                       ,
                                       gloo_comm
#endif
                                       >;
}  // namespace detail

class host_comm : public detail::held_comm<host_comm, detail::host_comm_variant> {
 public:
  explicit host_comm(self_comm c) : held_comm(std::move(c)) {}
#if STRATA_HAS_MPI
  explicit host_comm(mpi_comm c) : held_comm(std::move(c)) {}
#endif
#if STRATA_HAS_GLOO
  explicit host_comm(gloo_comm c) : held_comm(std::move(c)) {}
#endif

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
};

static_assert(communicator<host_comm>);

}  // namespace strata
