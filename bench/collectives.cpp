// bench/collectives: an nccl-tests-style table of all_reduce, reduce_scatter and all_gather
// through strata's mpi_comm and through raw MPI on the same kind of communicator, in one run;
// where the build has Gloo, through strata's gloo_comm over the same processes too (what a
// job launched without MPI uses; its pairs on loopback, or on STRATA_GLOO_IFNAME).
//   mpiexec -n 2 bench/collectives [--device cpu] [--min-bytes 4096] [--max-bytes 268435456] [--iters 20] [--warmup 3]
// --device cuda is the same comparison for nccl_comm against raw NCCL on device buffers
// (collectives_device.cu, linked in where the build has CUDA; one process per GPU):
//  [mpiexec -n N] bench/collectives --device cuda [--min-bytes 1024] [--max-bytes 1073741824] [--iters 20] [--warmup 5]
// The host path needs MPI (STRATA_ENABLE_MPI); the CUDA path bootstraps NCCL over MPI
// where the build has it, otherwise over a one-process self_comm.
#include "device_entry.hpp"

#if STRATA_HAS_MPI
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <strata/comm/environment.hpp>
#include <strata/space/host.hpp>
#if STRATA_HAS_GLOO
#include <strata/comm/gloo.hpp>
#endif

namespace {

struct options {
  std::size_t min_bytes = 4096, max_bytes = std::size_t{256} << 20;
  int iters = 20, warmup = 3;
};

[[noreturn]] void usage(const std::string& why) {
  strata_bench::exit_usage(why == "help" ? why : "collectives: " + why,
                           "usage: mpiexec -n N collectives [--device cpu] [--min-bytes N] [--max-bytes N] [--iters N] "
                           "[--warmup N]\n       collectives --device cuda [--min-bytes N] [--max-bytes N] [--iters N] "
                           "[--warmup N]\n");
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("help");
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--min-bytes")
      o.min_bytes = std::strtoull(next(), nullptr, 10);
    else if (a == "--max-bytes")
      o.max_bytes = std::strtoull(next(), nullptr, 10);
    else if (a == "--iters")
      o.iters = std::atoi(next());
    else if (a == "--warmup")
      o.warmup = std::atoi(next());
    else
      usage("unknown option " + a);
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.iters < 1 || o.warmup < 0)
    usage("need 4 <= min-bytes <= max-bytes, iters >= 1, warmup >= 0");
  return o;
}

enum class op { all_reduce, reduce_scatter, all_gather };
const char* name_of(op o) {
  return o == op::all_reduce ? "all_reduce" : o == op::reduce_scatter ? "reduce_scatter" : "all_gather";
}
// nccl-tests' bus bandwidth factors: what each rank's link carries relative to the size.
double bus_factor(op o, int n) { return o == op::all_reduce ? 2.0 * (n - 1) / n : static_cast<double>(n - 1) / n; }

using strata_bench::median;

int run_host(int argc, char** argv) {
  const options opt = parse(argc, argv);  // before MPI: a usage exit leaves no MPI job behind
  strata::environment env(argc, argv);
  auto& world = env.world();
  const int p = world.size(), me = world.rank();

  // Raw MPI gets its own duplicate of the world, as strata's world is one; a third
  // duplicate carries the benchmark's own barriers and timing reductions.
  MPI_Comm raw, ctl;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  MPI_Comm_dup(MPI_COMM_WORLD, &ctl);
#if STRATA_HAS_GLOO
  auto gloo = strata::gloo_comm::over(world, "gloo", "127.0.0.1");
  constexpr int ways = 3;
#else
  constexpr int ways = 2;
#endif

  // Allocated and touched once (host_buffer zero-fills); zeros keep sums free of
  // denormals and overflow however many times they are reduced.
  const std::size_t max_count = opt.max_bytes / sizeof(float);
  strata::host_buffer<float> a(max_count), b(max_count);

  if (me == 0)
    std::printf(
        "# strata bench/collectives: %d processes, float, sum; times are medians of %d iterations (max over ranks)\n"
        "# busbw factors (nccl-tests): all_reduce 2(n-1)/n, reduce_scatter and all_gather (n-1)/n\n"
        "# ratio = busbw strata / busbw raw: the median over iterations of raw time / strata time, each pair\n"
        "# run back to back\n",
        p, opt.iters);

  for (op o : {op::all_reduce, op::reduce_scatter, op::all_gather}) {
    if (me == 0)
      std::printf("\n# %s\n# %12s %11s | %10s %9s %9s | %10s %9s %9s | %6s%s\n", name_of(o), "size(B)", "count",
                  "strata(us)", "algbw", "busbw", "raw(us)", "algbw", "busbw", "ratio",
                  ways == 3 ? " | gloo(us)     busbw  gloo/raw" : "");
    std::vector<double> big_ratios;
    for (std::size_t bytes = opt.min_bytes; bytes <= opt.max_bytes; bytes *= 4) {
      // As in nccl-tests, size is the whole buffer: the input of reduce_scatter, the
      // output of all_gather; it is split into p equal blocks.
      const std::size_t count = bytes / sizeof(float) / static_cast<std::size_t>(p) * static_cast<std::size_t>(p);
      const std::size_t block = count / static_cast<std::size_t>(p);
      const int ic = static_cast<int>(count), ib = static_cast<int>(block);
      auto run_strata = [&] {
        switch (o) {
          case op::all_reduce: world.all_reduce(std::span(a.data(), count)); break;
          case op::reduce_scatter:
            world.reduce_scatter(std::span<const float>(a.data(), count), std::span(b.data(), block));
            break;
          case op::all_gather:
            world.all_gather(std::span<const float>(a.data(), block), std::span(b.data(), count));
            break;
        }
      };
#if STRATA_HAS_GLOO
      auto run_gloo = [&] {
        switch (o) {
          case op::all_reduce: gloo.all_reduce(std::span(a.data(), count)); break;
          case op::reduce_scatter:
            gloo.reduce_scatter(std::span<const float>(a.data(), count), std::span(b.data(), block));
            break;
          case op::all_gather:
            gloo.all_gather(std::span<const float>(a.data(), block), std::span(b.data(), count));
            break;
        }
      };
#else
      auto run_gloo = [] {};
#endif
      auto run_raw = [&] {
        switch (o) {
          case op::all_reduce: MPI_Allreduce(MPI_IN_PLACE, a.data(), ic, MPI_FLOAT, MPI_SUM, raw); break;
          case op::reduce_scatter: MPI_Reduce_scatter_block(a.data(), b.data(), ib, MPI_FLOAT, MPI_SUM, raw); break;
          case op::all_gather: MPI_Allgather(a.data(), ib, MPI_FLOAT, b.data(), ib, MPI_FLOAT, raw); break;
        }
      };
      // Alternating the two per iteration gives both the same machine conditions; the
      // ratio is the median of each iteration's pair, robust to a machine shared with others.
      std::vector<double> t_strata, t_raw, t_gloo, pair_ratio, gloo_ratio;
      for (int it = 0; it < opt.warmup + opt.iters; ++it) {
        double t[3] = {};
        for (int k = 0; k < ways; ++k) {
          const int which = (it + k) % ways;  // rotate which goes first
          MPI_Barrier(ctl);
          const double t0 = MPI_Wtime();
          which == 1 ? run_raw() : which == 0 ? run_strata() : run_gloo();
          t[which] = MPI_Wtime() - t0;
          MPI_Allreduce(MPI_IN_PLACE, &t[which], 1, MPI_DOUBLE, MPI_MAX, ctl);
        }
        if (it < opt.warmup) continue;
        t_strata.push_back(t[0]);
        t_raw.push_back(t[1]);
        pair_ratio.push_back(t[1] / t[0]);
        t_gloo.push_back(t[2]);
        gloo_ratio.push_back(t[2] > 0 ? t[1] / t[2] : 0);
      }
      const double ts = median(t_strata), tr = median(t_raw), tg = median(t_gloo);
      const double size = static_cast<double>(count * sizeof(float));
      const double f = bus_factor(o, p);
      const double ratio = median(pair_ratio);  // busbw(strata) / busbw(raw)
      if (bytes >= (std::size_t{1} << 20)) big_ratios.push_back(ratio);
      if (me == 0) {
        std::printf("  %12zu %11zu | %10.1f %9.3f %9.3f | %10.1f %9.3f %9.3f | %6.3f", count * sizeof(float), count,
                    ts * 1e6, size / ts * 1e-9, size / ts * 1e-9 * f, tr * 1e6, size / tr * 1e-9, size / tr * 1e-9 * f,
                    ratio);
        if (ways == 3) std::printf(" | %8.1f %9.3f %9.3f", tg * 1e6, size / tg * 1e-9 * f, median(gloo_ratio));
        std::printf("\n");
      }
    }
    if (me == 0 && !big_ratios.empty())
      std::printf("# %s: median busbw ratio strata/raw for sizes >= 1 MiB: %.3f (lowest %.3f)\n", name_of(o),
                  median(big_ratios), *std::min_element(big_ratios.begin(), big_ratios.end()));
  }
  MPI_Comm_free(&raw);
  MPI_Comm_free(&ctl);
  return 0;
}

}  // namespace
#else
#include <cstdio>

namespace {
int run_host(int, char**) {
  std::fprintf(stderr,
               "collectives: --device cpu compares strata's mpi_comm with raw MPI, and this build has no MPI "
               "(configure with -DSTRATA_ENABLE_MPI=ON)\n");
  return 2;
}
}  // namespace
#endif

int main(int argc, char** argv) {
  if (strata_bench::take_device("collectives", argc, argv) == strata_bench::device_kind::cuda) {
#if STRATA_BENCH_HAS_CUDA
    return strata_bench::run_collectives_cuda(argc, argv);
#else
    strata_bench::exit_no_cuda("collectives");
#endif
  }
  return run_host(argc, argv);
}
