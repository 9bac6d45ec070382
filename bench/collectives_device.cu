// bench/collectives --device cuda: an nccl-tests-style table of all_reduce, reduce_scatter,
// all_gather and broadcast on device buffers through strata's nccl_comm and through raw
// NCCL calls on a second NCCL communicator of the same processes, in one run, with a
// device-to-device copy of the same size as a further reference. Linked into
// bench/collectives (whose main() is in collectives.cpp) where the build has CUDA.
//   [mpiexec -n N] collectives --device cuda [--min-bytes 1024] [--max-bytes 1073741824] [--iters 20] [--warmup 5]
// One process per GPU (the device is the local rank's). Both NCCL communicators are
// bootstrapped over the host world (MPI, or a one-process self_comm in a build without
// MPI): rank 0 makes the ncclUniqueId and the world broadcasts it. With one process the
// table is that of a size-1 communicator: busbw is 0 by nccl-tests' factors, algbw is what
// it moved.
//
// strata's operations run on the communicator's own stream, ordered after the compute
// stream by an event and joined back by wait(); the raw calls go straight onto the
// compute stream. Both are timed by the same events on the compute stream, so the ratio
// is what the ordering costs. As in bench/collectives, the two alternate within each
// iteration (which goes first alternates too), every rank enters each after a barrier,
// a time is the maximum over ranks, and the ratio is the median over iterations of
// raw time / strata time (= busbw strata / busbw raw).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/environment.hpp>
#include <strata/comm/nccl.hpp>
#include <strata/space/cuda.hpp>

#include "device_entry.hpp"

namespace {

struct options {
  std::size_t min_bytes = 1024, max_bytes = std::size_t{1} << 30;
  int iters = 20, warmup = 5;
};

[[noreturn]] void usage(const std::string& why) {
  strata_bench::exit_usage(
      why == "help" ? why : "collectives --device cuda: " + why,
      "usage: collectives --device cuda [--min-bytes N] [--max-bytes N] [--iters N] [--warmup N]\n");
}

options parse(int argc, char** argv) {
  options o;
  using strata_bench::int_option;
  strata_bench::parse_int_options(argc, argv,
                                  {int_option{"--min-bytes", [&](auto v) { o.min_bytes = v; }},
                                   int_option{"--max-bytes", [&](auto v) { o.max_bytes = v; }},
                                   int_option{"--iters", o.iters}, int_option{"--warmup", o.warmup}},
                                  usage);
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 1 || o.warmup < 0)
    usage("need 4 <= min-bytes <= max-bytes, iters >= 1, warmup >= 0");
  return o;
}

using strata_bench::median;

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

// What a program using NCCL's non-blocking mode writes after each call: poll the
// communicator until the call's work has settled.
ncclResult_t settle(ncclComm_t comm, ncclResult_t r) {
  while (r == ncclInProgress) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm, &state);
    r = q != ncclSuccess ? q : state;
  }
  return r;
}

// The raw baseline's communicator: what a program without strata writes (the unique id
// from rank 0 over the host world, ncclCommInitRank, ncclCommDestroy).
class raw_nccl {
 public:
  // blocking = false: NCCL's non-blocking mode, which nccl_comm uses for its time-outs.
  raw_nccl(strata::world_comm& host, int device, bool blocking = true) {
    ncclUniqueId id{};
    if (host.rank() == 0) STRATA_CHECK_NCCL(ncclGetUniqueId(&id));
    host.broadcast(std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(&id), sizeof id), 0);
    strata::device_guard g(device);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = blocking ? 1 : 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, host.size(), id, host.rank(), &config);
    r = settle(comm_, r);
    STRATA_CHECK_NCCL(r);
  }
  raw_nccl(const raw_nccl&) = delete;
  raw_nccl& operator=(const raw_nccl&) = delete;
  ~raw_nccl() {
    if (comm_) (void)ncclCommDestroy(comm_);
  }
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// Where a small collective's time goes beyond raw NCCL's: each row adds one thing that
// nccl_comm does per call to a raw ncclAllReduce (in place, `count` floats), timed as
// `calls` calls back to back: host microseconds per call (the enqueue, no sync) and
// device-timeline microseconds per call (events on the compute stream around the loop,
// which include the host's enqueue time whenever the GPU waits for it).
void per_call_breakdown(strata::nccl_comm& comm, strata::world_comm& host, float* a, std::size_t count, int calls,
                        cudaStream_t cs) {
  const raw_nccl blocking(host, comm.device()), nonblocking(host, comm.device(), false);
  strata::cuda_stream side;
  strata::cuda_event ready, done, start(strata::cuda_event::timing::on), stop(strata::cuda_event::timing::on);
  auto raw_on = [&](const raw_nccl& r, cudaStream_t s) {
    ncclResult_t e = ncclAllReduce(a, a, count, ncclFloat32, ncclSum, r.get(), s);
    STRATA_CHECK_NCCL(settle(r.get(), e));
  };
  auto hop = [&](auto&& enqueue) {  // the two event hops nccl_comm makes between its streams
    ready.record(cs);
    side.wait(ready);
    enqueue(side.get());
    done.record(side);
    strata::stream_wait(cs, done);
  };
  struct row {
    const char* what;
    std::function<void()> call;
  };
  const std::vector<row> rows{
      {"raw NCCL on the compute stream", [&] { raw_on(blocking, cs); }},
      {"+ non-blocking communicator", [&] { raw_on(nonblocking, cs); }},
      {"+ cudaPointerGetAttributes",
       [&] {
         cudaPointerAttributes at{};
         STRATA_CHECK_CUDA(cudaPointerGetAttributes(&at, a));
         raw_on(nonblocking, cs);
       }},
      {"+ ncclCommGetAsyncError",
       [&] {
         ncclResult_t st = ncclSuccess;
         STRATA_CHECK_NCCL(ncclCommGetAsyncError(nonblocking.get(), &st));
         raw_on(nonblocking, cs);
       }},
      {"raw NCCL on a side stream, two event hops", [&] { hop([&](cudaStream_t s) { raw_on(blocking, s); }); }},
      {"strata nccl_comm::all_reduce", [&] { comm.all_reduce(std::span(a, count)); }},
      {"strata all_reduce_async, then wait", [&] { comm.all_reduce_async(std::span(a, count)).wait(); }},
  };
  if (host.rank() == 0)
    std::printf(
        "\n# per-call breakdown: all_reduce of %zu floats in place, %d calls back to back, median of 5\n"
        "# %-44s %12s %14s\n",
        count, calls, "what", "host us/call", "device us/call");
  for (const row& r : rows) {
    std::vector<double> host_us, device_us;
    for (int rep = 0; rep < 6; ++rep) {
      comm.barrier();
      strata::wait_stream(cs);
      start.record(cs);
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < calls; ++i) r.call();
      const auto t1 = std::chrono::steady_clock::now();
      stop.record(cs);
      stop.synchronize();
      if (rep == 0) continue;  // warm-up
      host_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
      device_us.push_back(1e3 * static_cast<double>(elapsed_ms(start, stop)) / calls);
    }
    double t[2] = {median(host_us), median(device_us)};
    host.all_reduce(std::span<double>(t, 2), strata::reduce_op::max);
    if (host.rank() == 0) std::printf("  %-44s %12.2f %14.2f\n", r.what, t[0], t[1]);
  }
  std::fflush(stdout);
}

}  // namespace

int strata_bench::run_collectives_cuda(int argc, char** argv) {
  const options opt = parse(argc, argv);
  strata::environment env(argc, argv);
  if (const auto gpu = strata::probe_cuda(); !gpu.usable)
    return strata_bench::no_gpu_status("collectives --device cuda", gpu.absent, strata::gpu_required(), gpu.reason,
                                       env.rank() == 0);
  try {
    strata::select_device(env.local_rank());
    strata::cuda_stream compute;
    const cudaStream_t cs = compute.get();
    strata::nccl_comm comm(env.world(), {.compute_stream = cs, .name = "bench"});
    const raw_nccl raw(env.world(), comm.device());
    const int p = comm.size();
    const std::size_t max_count = opt.max_bytes / sizeof(float);
    strata::cuda_buffer<float> a(max_count), b(max_count);
    strata::cuda_event start(strata::cuda_event::timing::on), stop(strata::cuda_event::timing::on);
    // Microseconds of `fn` on the compute stream's timeline, entered by all ranks together.
    // strata's operations are bracketed too: each waits for the compute stream and wait()
    // makes the compute stream wait for it.
    auto once_us = [&](auto&& fn) {
      comm.barrier();
      start.record(cs);
      fn();
      stop.record(cs);
      stop.synchronize();
      return 1e3 * static_cast<double>(elapsed_ms(start, stop));
    };
    auto median_us = [&](auto&& fn) {
      std::vector<double> t;
      for (int it = 0; it < opt.warmup + opt.iters; ++it) {
        const double us = once_us(fn);
        if (it >= opt.warmup) t.push_back(us);
      }
      return median(t);
    };
    if (env.rank() == 0) {
      cudaDeviceProp prop{};
      STRATA_CHECK_CUDA(cudaGetDeviceProperties(&prop, comm.device()));
      std::printf(
          "# strata bench/collectives --device cuda: %d process(es), %s, NCCL %d.%d.%d, float, sum; medians of %d "
          "iterations (max over ranks)\n# busbw factors (nccl-tests): all_reduce 2(n-1)/n, reduce_scatter and "
          "all_gather (n-1)/n, broadcast 1\n# ratio = busbw strata / busbw raw NCCL: the median over iterations "
          "of raw time / strata time, each pair run back to back\n# copy = cudaMemcpyAsync device to device of "
          "the same size (bytes read + written)\n",
          p, prop.name, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, opt.iters);
    }
    for (op o : {op::all_reduce, op::reduce_scatter, op::all_gather, op::broadcast}) {
      if (env.rank() == 0)
        std::printf("\n# %s\n# %12s %11s | %10s %9s %9s | %10s %9s %9s | %6s | %10s %9s\n", name_of(o), "size(B)",
                    "count", "strata(us)", "algbw", "busbw", "raw(us)", "algbw", "busbw", "ratio", "copy(us)",
                    "copy GB/s");
      std::vector<double> big_ratios;
      for (std::size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
        // As in nccl-tests, size is the whole buffer: the input of reduce_scatter, the
        // output of all_gather; it is split into p equal blocks.
        const std::size_t count = bytes / sizeof(float) / static_cast<std::size_t>(p) * static_cast<std::size_t>(p);
        const std::size_t block = count / static_cast<std::size_t>(p);
        auto run_strata = [&] {
          switch (o) {
            case op::all_reduce: comm.all_reduce(std::span(a.data(), count)); break;
            case op::reduce_scatter:
              comm.reduce_scatter(std::span<const float>(a.data(), count), std::span(b.data(), block));
              break;
            case op::all_gather:
              comm.all_gather(std::span<const float>(a.data(), block), std::span(b.data(), count));
              break;
            case op::broadcast: comm.broadcast(std::span(a.data(), count), 0); break;
          }
        };
        auto run_raw = [&] {
          switch (o) {
            case op::all_reduce:
              STRATA_CHECK_NCCL(ncclAllReduce(a.data(), a.data(), count, ncclFloat32, ncclSum, raw.get(), cs));
              break;
            case op::reduce_scatter:
              STRATA_CHECK_NCCL(ncclReduceScatter(a.data(), b.data(), block, ncclFloat32, ncclSum, raw.get(), cs));
              break;
            case op::all_gather:
              STRATA_CHECK_NCCL(ncclAllGather(a.data(), b.data(), block, ncclFloat32, raw.get(), cs));
              break;
            case op::broadcast:
              STRATA_CHECK_NCCL(ncclBroadcast(a.data(), a.data(), count, ncclFloat32, 0, raw.get(), cs));
              break;
          }
        };
        // Alternating the two per iteration gives both the same machine conditions; the
        // ratio is the median of each iteration's pair.
        std::vector<double> t_strata, t_raw, pair_ratio;
        for (int it = 0; it < opt.warmup + opt.iters; ++it) {
          double t[2];
          for (int k = 0; k < 2; ++k) {
            const int which = (it + k) % 2;  // alternate which goes first
            t[which] = which ? once_us(run_raw) : once_us(run_strata);
          }
          env.world().all_reduce(std::span<double>(t, 2), strata::reduce_op::max);
          if (it < opt.warmup) continue;
          t_strata.push_back(t[0]);
          t_raw.push_back(t[1]);
          pair_ratio.push_back(t[1] / t[0]);
        }
        const double ts = median(t_strata), tr = median(t_raw);
        const double tc = median_us([&] { strata::cuda::copy_async(b.data(), a.data(), count * sizeof(float), cs); });
        const double size = static_cast<double>(count * sizeof(float));
        const double f = bus_factor(o, p);
        const double ratio = median(pair_ratio);  // busbw(strata) / busbw(raw)
        if (bytes >= (std::size_t{1} << 20)) big_ratios.push_back(ratio);
        if (env.rank() == 0)
          std::printf("  %12zu %11zu | %10.1f %9.2f %9.2f | %10.1f %9.2f %9.2f | %6.3f | %10.1f %9.1f\n",
                      count * sizeof(float), count, ts, size / ts * 1e-3, size / ts * 1e-3 * f, tr, size / tr * 1e-3,
                      size / tr * 1e-3 * f, ratio, tc, 2.0 * size / tc * 1e-3);
      }
      if (env.rank() == 0 && !big_ratios.empty())
        std::printf("# %s: median busbw ratio strata/raw NCCL for sizes >= 1 MiB: %.3f (lowest %.3f)\n", name_of(o),
                    median(big_ratios), *std::min_element(big_ratios.begin(), big_ratios.end()));
      std::fflush(stdout);
    }
    per_call_breakdown(comm, env.world(), a.data(), 256, 2000, cs);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives --device cuda (rank %d): %s\n", env.rank(), e.what());
    return 1;
  }
}
