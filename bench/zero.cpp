// bench/zero: per-rank memory by category and median step time of the MLP for each
// sharding stage, all measured in one run, with ratios against replicated (stage 0), and
// next to each stage's memory report the peak it measured: how much the most-grown
// rank's resident peak rose from before its trainer was built to after the weights hash.
//   mpiexec -n 4 bench/zero [--hidden 1024 --layers 4 --batch 256 --steps 12 --precision fp32]
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <strata/strata.hpp>
#include <vector>

#include "../examples/common/args.hpp"
#include "../examples/mlp/model.hpp"

namespace {

struct row {
  std::string name;
  strata::memory_report mem;
  double median_s = 0;
  std::uint64_t hash = 0;
  std::size_t peak = 0;  // the largest rank's peak resident growth over the run
};

template <class Sharding, class Precision>
row measure(strata::grid<strata::world_comm>& g, const mlp::shape_config& shape, long batch, long steps,
            const strata::trainer_options& opts) {
  malloc_trim(0);  // the previous stage's freed memory goes back to the kernel first
  g.world().barrier();
  strata::reset_peak_resident();
  const std::size_t base = strata::resident_bytes();
  strata::trainer<mlp::model, strata::host, Sharding, strata::adamw, Precision> tr(g, mlp::make_model(shape), opts);
  mlp::synthetic_data data(shape, 3);
  strata::batch<> b;
  const long local = batch / g.dp_size();
  std::vector<double> times;
  for (long s = 0; s < steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s * batch + g.dp_rank() * local), local, b);
    g.data().barrier();
    const auto st = tr.step(b);
    if (s >= 2) times.push_back(st.seconds);  // the first steps size the activations
  }
  // The slowest rank decides a step's time.
  for (double& t : times) g.data().all_reduce(std::span<double>(&t, 1), strata::reduce_op::max);
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  row r;
  r.name = Sharding::name + std::string(Sharding::offload ? "+offload" : "");
  r.mem = tr.memory();
  r.median_s = times.empty() ? 0 : times[times.size() / 2];
  r.hash = strata::weights_hash_of(tr);
  double peak = static_cast<double>(strata::peak_resident_bytes() - base);
  g.world().all_reduce(std::span<double>(&peak, 1), strata::reduce_op::max);
  r.peak = static_cast<std::size_t>(peak);
  return r;
}

double mib(std::size_t b) { return static_cast<double>(b) / (1 << 20); }

}  // namespace

const char* const usage =
    "usage: mpiexec -n N bench/zero [--features F --hidden H --layers L --classes C --batch B --steps S\n"
    "                                --bucket ELEMS --precision fp32|bf16]\n"
    "  Per-rank memory by category and median step time of the MLP at every ZeRO stage (and offload),\n"
    "  with the weights hash of each.\n";

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  return examples::run_main("bench/zero", usage, env.rank(), argc, argv, [&]() -> int {
    examples::args a(argc, argv, {});
    mlp::shape_config shape;
    shape.features = a.count("features", 256);
    shape.hidden = a.count("hidden", 1024);
    shape.layers = a.count("layers", 4);
    shape.classes = a.count("classes", 16);
    const long batch = a.integer("batch", 256, 1), steps = a.integer("steps", 12, 3);
    const std::string precision = a.str("precision", "fp32");
    strata::trainer_options opts;
    opts.bucket_elems = static_cast<std::size_t>(a.integer("bucket", 1 << 18, 1));
    opts.schedule = strata::lr_schedule::constant(1e-3);
    a.check_all_used();

    strata::grid g(env.world());
    std::vector<row> rows;
    auto run_all = [&](auto precision_tag) {
      using P = typename decltype(precision_tag)::type;
      rows.push_back(measure<strata::replicated, P>(g, shape, batch, steps, opts));
      rows.push_back(measure<strata::zero<1>, P>(g, shape, batch, steps, opts));
      rows.push_back(measure<strata::zero<2>, P>(g, shape, batch, steps, opts));
      rows.push_back(measure<strata::zero<3>, P>(g, shape, batch, steps, opts));
      rows.push_back(measure<strata::zero<3, strata::offload_optimizer>, P>(g, shape, batch, steps, opts));
    };
    if (precision == "bf16")
      run_all(strata::type_tag<strata::mixed<strata::bf16>>{});
    else
      run_all(strata::type_tag<strata::fp32>{});

    if (env.rank() == 0) {
      std::printf(
          "# bench/zero: MLP %d-%dx%d-%d (%zu params), %d ranks, global batch %ld, AdamW %s, median of %ld steps\n",
          shape.features, shape.hidden, shape.layers, shape.classes, rows[0].mem.bytes.at("master") / 4, g.dp_size(),
          batch, precision.c_str(), steps - 2);
      std::printf("%-16s %9s %9s %9s %9s %9s %10s %9s %11s %9s %10s %8s %s\n", "stage", "params", "grads", "master",
                  "optim", "comm", "state MiB", "offl. MiB", "report MiB", "peak MiB", "step ms", "vs rep.",
                  "weights_hash");
      for (const auto& r : rows) {
        const auto& m = r.mem.bytes;
        const std::size_t state = r.mem.total() - m.at("activations") - m.at("io_staging");
        std::printf("%-16s %9.2f %9.2f %9.2f %9.2f %9.2f %10.2f %9.2f %11.2f %9.2f %10.2f %8.2f %s\n", r.name.c_str(),
                    mib(m.at("params")), mib(m.at("grads")), mib(m.at("master")), mib(m.at("optimizer_states")),
                    mib(m.at("comm_buffers")), mib(state), mib(r.mem.in_space(true)), mib(r.mem.total()), mib(r.peak),
                    r.median_s * 1e3, r.median_s / rows[0].median_s, strata::hex64(r.hash).c_str());
      }
      std::printf(
          "(MiB per rank. state: params to comm (and offload staging); report: all of tr.memory(), activations and\n"
          " io staging too; peak: the most-grown rank's resident peak over the run, from before the trainer to after\n"
          " the weights hash. 'vs rep.' = step time / replicated step time)\n");
    }
    return 0;
  });
}
