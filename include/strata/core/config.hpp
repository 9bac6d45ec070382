// Configuration macros shared by every strata header: attribute macros for code that
// runs on both host and device, and the feature flags the build sets.
#pragma once

// Only attributes vary with the compiler; no type or function is defined differently
// under nvcc, so host and CUDA translation units agree on every definition (ODR).
#if defined(__CUDACC__) || defined(__HIPCC__)
#define STRATA_HOST_DEVICE __host__ __device__
#define STRATA_DEVICE __device__
#else
#define STRATA_HOST_DEVICE
#define STRATA_DEVICE
#endif

#define STRATA_FORCEINLINE inline __attribute__((always_inline))

// Feature flags. The CMake target defines them; a user who includes the headers
// without CMake may define them by hand. MPI is detected from <mpi.h> being reachable.
#ifndef STRATA_HAS_MPI
#if __has_include(<mpi.h>)
#define STRATA_HAS_MPI 1
#else
#define STRATA_HAS_MPI 0
#endif
#endif

// Gloo (jobs launched without MPI) needs its library linked: only the build turns it on.
#ifndef STRATA_HAS_GLOO
#define STRATA_HAS_GLOO 0
#endif

// OpenSSL's libcrypto proves a rendezvous's job secret (STRATA_JOB_SECRET); only the build
// turns it on, as it must be linked.
#ifndef STRATA_HAS_OPENSSL
#define STRATA_HAS_OPENSSL 0
#endif

#ifndef STRATA_HAS_CUDA
#define STRATA_HAS_CUDA 0
#endif

#include "version.hpp"
