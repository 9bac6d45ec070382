// Which memory a pointer a device communicator was given is: NCCL and the MPI device
// communicator read device memory (a host pointer would fault inside a kernel, or be
// copied from as if it were device memory), and host data comes from pinned memory.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "../../core/error.hpp"

namespace strata::detail {

// Throws a comm_error "OP on COMM: the buffer at P OTHERWISE" unless p is null or device
// memory (pinned_host: page-locked host memory).
inline void expect_memory_kind(const void* p, const char* op, const std::string& comm, bool pinned_host,
                               const char* otherwise) {
  if (!p) return;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, p);
  if (e != cudaSuccess) (void)cudaGetLastError();
  const bool ok = e == cudaSuccess && (pinned_host ? a.type == cudaMemoryTypeHost
                                                   : a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged);
  expects<comm_error>(ok, [&] { return strata::cat(op, " on ", comm, ": the buffer at ", p, " ", otherwise); });
}

}  // namespace strata::detail
