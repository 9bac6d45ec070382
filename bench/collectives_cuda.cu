// bench/collectives_cuda: an nccl-tests-style table of strata's nccl_comm collectives
// (all_reduce, reduce_scatter, all_gather, broadcast) on device buffers, with a device-to-
// device copy of the same size measured in the same run as the reference.
//   [mpiexec -n N] collectives_cuda [--min-bytes 1024] [--max-bytes 1073741824] [--iters 20] [--warmup 5]
// One process per GPU (the device is the local rank's). With one process the table is
// that of a size-1 communicator: busbw is 0 by nccl-tests' factors, algbw is what it moved.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/environment.hpp>
#include <strata/comm/nccl.hpp>
#include <strata/space/cuda.hpp>

namespace {

struct options {
  std::size_t min_bytes = 1024, max_bytes = std::size_t{1} << 30;
  int iters = 20, warmup = 5;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "collectives_cuda: %s\nusage: collectives_cuda [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n",
               why.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (i + 1 >= argc) usage(std::string(a) + " needs a value");
    char* end = nullptr;
    const unsigned long long v = std::strtoull(argv[++i], &end, 10);
    if (*end) usage(std::string(a) + " wants a non-negative integer");
    if (a == "--min-bytes") o.min_bytes = v;
    else if (a == "--max-bytes") o.max_bytes = v;
    else if (a == "--iters") o.iters = static_cast<int>(v);
    else if (a == "--warmup") o.warmup = static_cast<int>(v);
    else usage("unknown option " + std::string(a));
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 1) usage("need 4 <= min-bytes <= max-bytes, iters >= 1");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

enum class op { all_reduce, reduce_scatter, all_gather, broadcast };
const char* name_of(op o) {
  switch (o) {
    case op::all_reduce: return "all_reduce";
    case op::reduce_scatter: return "reduce_scatter";
    case op::all_gather: return "all_gather";
    case op::broadcast: return "broadcast";
  }
  return "?";
}
// nccl-tests' bus bandwidth factors.
double bus_factor(op o, int n) {
  switch (o) {
    case op::all_reduce: return 2.0 * (n - 1) / n;
    case op::reduce_scatter:
    case op::all_gather: return static_cast<double>(n - 1) / n;
    case op::broadcast: return 1.0;
  }
  return 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  const options opt = parse(argc, argv);
  strata::environment env(argc, argv);
  if (!strata::cuda_available()) {
    if (env.rank() == 0) std::printf("collectives_cuda: no GPU on this machine; nothing to measure\n");
    return 0;
  }
  try {
    strata::select_device(env.local_rank());
    strata::cuda_stream compute;
    strata::nccl_comm comm(env.world(), {.compute_stream = compute.get(), .name = "bench"});
    const int p = comm.size();
    const std::size_t max_count = opt.max_bytes / sizeof(float);
    strata::cuda_buffer<float> a(max_count), b(max_count);
    strata::cuda_event start(strata::cuda_event::timing::on), stop(strata::cuda_event::timing::on);
    // The operation is queued on the compute stream's timeline: events on it bracket the
    // communication stream's work because every operation waits for it and wait() joins back.
    auto time_us = [&](auto&& fn) {
      std::vector<double> t;
      for (int it = 0; it < opt.warmup + opt.iters; ++it) {
        comm.barrier();
        start.record(compute);
        fn();
        stop.record(compute);
        stop.synchronize();
        if (it >= opt.warmup) t.push_back(1e3 * elapsed_ms(start, stop));
      }
      return median(t);
    };
    if (env.rank() == 0) {
      cudaDeviceProp prop{};
      STRATA_CHECK_CUDA(cudaGetDeviceProperties(&prop, comm.device()));
      std::printf("# strata bench/collectives_cuda: %d process(es), %s, NCCL %d.%d.%d, float, sum; medians of %d "
                  "iterations\n# busbw factors (nccl-tests): all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n, "
                  "broadcast 1\n# copy = cudaMemcpyAsync device to device of the same size (bytes read + written)\n",
                  p, prop.name, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, opt.iters);
    }
    for (op o : {op::all_reduce, op::reduce_scatter, op::all_gather, op::broadcast}) {
      if (env.rank() == 0)
        std::printf("\n# %s\n# %12s %11s | %10s %9s %9s | %10s %9s\n", name_of(o), "size(B)", "count", "time(us)",
                    "algbw", "busbw", "copy(us)", "copy GB/s");
      for (std::size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
        const std::size_t count = bytes / sizeof(float) / static_cast<std::size_t>(p) * static_cast<std::size_t>(p);
        const std::size_t block = count / static_cast<std::size_t>(p);
        const double t = time_us([&] {
          switch (o) {
            case op::all_reduce: comm.all_reduce(std::span(a.data(), count)); break;
            case op::reduce_scatter:
              comm.reduce_scatter(std::span<const float>(a.data(), count), std::span(b.data(), block));
              break;
            case op::all_gather: comm.all_gather(std::span<const float>(a.data(), block), std::span(b.data(), count)); break;
            case op::broadcast: comm.broadcast(std::span(a.data(), count), 0); break;
          }
        });
        const double tc = time_us([&] { strata::cuda::copy_async(b.data(), a.data(), count * sizeof(float), compute.get()); });
        const double size = static_cast<double>(count * sizeof(float));
        if (env.rank() == 0)
          std::printf("  %12zu %11zu | %10.1f %9.2f %9.2f | %10.1f %9.1f\n", count * sizeof(float), count, t,
                      size / t * 1e-3, size / t * 1e-3 * bus_factor(o, p), tc, 2.0 * size / tc * 1e-3);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_cuda (rank %d): %s\n", env.rank(), e.what());
    return 1;
  }
}
