// Which communicator moves a GPU trainer's gradients, params and activations:
// STRATA_DEVICE_COMM=nccl (the default: one process per GPU) or mpi (MPI, through pinned
// host memory or CUDA-aware MPI: several ranks may share a GPU, or a cluster has no NCCL).
// Read on every rank before any communicator is made, so a bad value is the same error
// everywhere, before training.
#pragma once
#include <cstdlib>
#include <string_view>

#include "../core/config.hpp"
#include "../core/error.hpp"

namespace strata {

enum class device_comm_kind { nccl, mpi };

constexpr std::string_view name_of(device_comm_kind k) { return k == device_comm_kind::mpi ? "mpi" : "nccl"; }

namespace detail {
// The choice `value` (the setting's text, or null when unset) names, in a build with or
// without MPI.
inline device_comm_kind parse_device_comm(const char* value, bool have_mpi) {
  const std::string_view v = value ? value : "";
  if (v.empty() || v == "nccl") return device_comm_kind::nccl;
  if (v == "mpi") {
    expects<config_error>(have_mpi, [] {
      return std::string(
          "STRATA_DEVICE_COMM=mpi: this build has no MPI (STRATA_ENABLE_MPI=OFF), so there is no MPI device "
          "communicator; build with MPI, or unset STRATA_DEVICE_COMM for NCCL (one process per GPU)");
    });
    return device_comm_kind::mpi;
  }
  throw config_error(cat("STRATA_DEVICE_COMM=\"", v,
                         "\" is not a device communicator: use nccl (the default; one process per GPU) or mpi "
                         "(through MPI: several ranks may share a GPU)"));
}
}  // namespace detail

// STRATA_DEVICE_COMM as this build reads it.
inline device_comm_kind device_comm_from_env() {
  return detail::parse_device_comm(std::getenv("STRATA_DEVICE_COMM"), STRATA_HAS_MPI != 0);
}

}  // namespace strata
