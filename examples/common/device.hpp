// --device cpu|cuda, as the examples take it. Each program X is two executables, so that a
// CPU run never maps the CUDA libraries (cudart, cuBLAS, cuBLASLt: about 200 MB resident
// per process before any tensor exists):
//   X       main.cpp and the host runs; links no CUDA library.
//   X-cuda  main.cpp and the program's .cu files (built where CUDA is enabled, with
//           STRATA_EXAMPLE_CUDA_BINARY=1); its run_cuda selects this process's GPU by
//           local rank and runs in strata::cuda.
// X started with --device cuda replaces itself with X-cuda, same arguments, before MPI
// starts (become_device_binary), so users and launchers only ever name X.
#pragma once
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/space/host.hpp>
#include <strata/space/host_threads.hpp>

#include "args.hpp"

namespace examples {

#if STRATA_EXAMPLE_CUDA_BINARY
inline constexpr bool cuda_binary = true;
#else
inline constexpr bool cuda_binary = false;
#endif

// The executable that runs --device cuda for this one: X-cuda next to X.
inline std::filesystem::path device_binary() {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return self.parent_path() / (self.filename().string() + "-cuda");
}

// Restarts this executable with OPENBLAS_CORETYPE set where OpenBLAS chose generic
// kernels for a CPU it does not know (space/host_threads.hpp): the same process (pid,
// arguments), before MPI starts, so launchers see nothing change.
inline void use_fitting_blas_kernels(char** argv) {
  const std::string core = strata::blas_kernel_advice();
  if (core.empty()) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  execv("/proc/self/exe", argv);  // on failure, go on with the generic kernels (host_threads warns)
  unsetenv("OPENBLAS_CORETYPE");
}

// First thing in main, before strata::environment: the BLAS's kernels fitted to the CPU
// (above), then X given `--device cuda` execs X-cuda with the same arguments. Where
// X-cuda is not built, X goes on and run_on says so.
inline void become_device_binary(int argc, char** argv) {
  use_fitting_blas_kernels(argv);
  if constexpr (!cuda_binary) {
    bool cuda = false;
    for (int i = 1; i + 1 < argc; ++i)
      if (std::string_view(argv[i]) == "--device") cuda = std::string_view(argv[i + 1]) == "cuda";
    const auto target = device_binary();
    if (!cuda || target.empty() || !std::filesystem::exists(target)) return;
    std::vector<char*> args(argv, argv + argc);
    const std::string path = target.string();
    args[0] = const_cast<char*>(path.c_str());
    args.push_back(nullptr);
    execv(path.c_str(), args.data());
    std::fprintf(stderr, "%s: error: --device cuda: cannot start %s: %s\n", argv[0], path.c_str(),
                 std::strerror(errno));
    std::exit(2);
  }
}

// --device: cpu or cuda. X-cuda runs only on GPUs, so cuda is its default.
inline std::string read_device(args& a) {
  const std::string device = a.str("device", cuda_binary ? "cuda" : "cpu");
  strata::expects<strata::config_error>(device == "cpu" || device == "cuda",
                                        [&] { return "--device " + device + " is not one of cpu, cuda"; });
  strata::expects<strata::config_error>(!cuda_binary || device == "cuda", [&] {
    return "--device cpu: this executable runs on GPUs; its host twin (the same name without -cuda) runs on CPUs";
  });
  return device;
}

// Tag of the device runs, for run_on.
struct cuda_runs {};

// Calls on_gpu(cuda_runs{}) in X-cuda and on_host(strata::host{}) in X. Both are generic
// lambdas, so neither executable instantiates the other's trainers.
template <class Host, class Gpu>
int run_on(const std::string& device, Host&& on_host, Gpu&& on_gpu) {
  if constexpr (cuda_binary) {
    return on_gpu(cuda_runs{});
  } else {
    if (device == "cuda")
      throw strata::config_error("--device cuda: no " + device_binary().filename().string() +
                                 " next to this program; it is built where CUDA is enabled"
                                 " (-DSTRATA_ENABLE_CUDA=ON with nvcc found)");
    return on_host(strata::host{});
  }
}

}  // namespace examples
