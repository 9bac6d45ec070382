// STRATA_DEVICE_COMM: which device communicator a GPU trainer uses, and the errors a user
// sees for a value that names none, or MPI in a build without it.
#include <stdlib.h>

#include <strata/comm/device_comm_kind.hpp>
#include <string>

#include "catch.hpp"

using strata::device_comm_kind;
using strata::detail::parse_device_comm;

namespace {
std::string config_error_of(const char* value, bool have_mpi) {
  try {
    parse_device_comm(value, have_mpi);
  } catch (const strata::config_error& e) {
    return e.what();
  }
  return "(no config_error)";
}
}  // namespace

TEST_CASE("unset, empty or nccl is NCCL; mpi is MPI where the build has it") {
  CHECK(parse_device_comm(nullptr, true) == device_comm_kind::nccl);
  CHECK(parse_device_comm("", false) == device_comm_kind::nccl);
  CHECK(parse_device_comm("nccl", false) == device_comm_kind::nccl);
  CHECK(parse_device_comm("mpi", true) == device_comm_kind::mpi);
  CHECK(strata::name_of(device_comm_kind::mpi) == "mpi");
  CHECK(strata::name_of(device_comm_kind::nccl) == "nccl");
}

TEST_CASE("an unknown value, or mpi without MPI, is a config_error naming the setting and what to do") {
  const std::string unknown = config_error_of("gloo", true);
  CHECK(unknown.find("STRATA_DEVICE_COMM=\"gloo\" is not a device communicator") != std::string::npos);
  CHECK(unknown.find("use nccl (the default; one process per GPU) or mpi") != std::string::npos);
  CHECK(config_error_of("MPI", true).find("STRATA_DEVICE_COMM=\"MPI\"") != std::string::npos);
  const std::string no_mpi = config_error_of("mpi", false);
  CHECK(no_mpi.find("STRATA_DEVICE_COMM=mpi: this build has no MPI") != std::string::npos);
  CHECK(no_mpi.find("unset STRATA_DEVICE_COMM") != std::string::npos);
}

TEST_CASE("device_comm_from_env reads STRATA_DEVICE_COMM") {
  ::setenv("STRATA_DEVICE_COMM", "bogus", 1);
  CHECK_THROWS_AS(strata::device_comm_from_env(), strata::config_error);
  ::setenv("STRATA_DEVICE_COMM", "nccl", 1);
  CHECK(strata::device_comm_from_env() == device_comm_kind::nccl);
  ::unsetenv("STRATA_DEVICE_COMM");
  CHECK(strata::device_comm_from_env() == device_comm_kind::nccl);
}
