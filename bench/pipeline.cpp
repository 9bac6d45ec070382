// bench/pipeline: the measured pipeline bubble (idle fraction of each stage's step) next
// to the ideal (p-1)/(m+p-1), for p = 2 and 4 stages and m = 1..16 micro-batches, and
// the peak activation memory per stage under gpipe and 1F1B. Launch with 4 processes:
//   mpiexec -n 4 bench/pipeline [--steps 4 --dim 64 --seq 32]
#include <cstdio>
#include <strata/strata.hpp>
#include <vector>

#include "../examples/common/args.hpp"
#include "../examples/gpt/model.hpp"

namespace {

struct measurement {
  double idle_fraction = 0;            // mean over stages of idle / step time (median step)
  std::vector<double> activation_mib;  // per stage
};

template <class Schedule>
measurement measure(strata::grid<strata::world_comm>& g, const gpt::config& cfg, int m, long steps, long rows_per_mb) {
  strata::trainer_options o;
  o.micro_batches = m;
  o.schedule = strata::lr_schedule::constant(1e-3);
  strata::trainer<gpt::model, strata::host, strata::replicated, strata::adamw, strata::fp32, Schedule> tr(
      g, gpt::make_model(cfg), o);
  gpt::synthetic_tokens data(cfg, 1);
  strata::batch<> b;
  std::vector<double> fractions;
  for (long s = 0; s < steps; ++s) {
    data.fill(static_cast<std::uint64_t>(s * m * rows_per_mb), m * rows_per_mb, b);
    g.world().barrier();
    const auto st = tr.step(b);
    if (s > 0) fractions.push_back(st.idle_seconds / st.seconds);  // step 0 sizes the buffers
  }
  std::sort(fractions.begin(), fractions.end());
  measurement r;
  double f = fractions[fractions.size() / 2];
  g.pipeline().all_reduce(std::span<double>(&f, 1), strata::reduce_op::avg);
  r.idle_fraction = f;
  double mib = static_cast<double>(tr.activation_bytes()) / (1 << 20);
  r.activation_mib.resize(static_cast<std::size_t>(g.pp_size()));
  g.pipeline().all_gather(std::span<const double>(&mib, 1), std::span<double>(r.activation_mib));
  return r;
}

}  // namespace

const char* const usage =
    "usage: mpiexec -n 4 bench/pipeline [--dim D --seq S --layers L --vocab V --steps N --rows R]\n"
    "  The measured pipeline bubble next to the ideal (p-1)/(m+p-1) for p = 2, 4 and m = 1..16, and the\n"
    "  peak activation memory per stage under gpipe and 1F1B.\n";

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  return examples::run_main("bench/pipeline", usage, env.rank(), argc, argv, [&]() -> int {
    examples::args a(argc, argv, {});
    gpt::config cfg;
    cfg.dim = a.count("dim", 96);
    cfg.seq = a.count("seq", 32);
    cfg.heads = 4;
    cfg.layers = a.count("layers", 6);
    cfg.vocab = a.count("vocab", 256);
    const long steps = a.integer("steps", 6, 2), rows = a.integer("rows", 8, 1);
    a.check_all_used();
    auto& w = env.world();
    if (w.rank() == 0)
      std::printf(
          "# bench/pipeline: gpt %d layers, dim %d, seq %d, %ld sequences per micro-batch, median of %ld steps\n"
          "# measured = mean over stages of (time waiting for neighbours / step time); ideal = (p-1)/(m+p-1)\n",
          cfg.layers, cfg.dim, cfg.seq, rows, steps - 1);
    for (int p : {2, 4}) {
      if (p > w.size()) break;
      strata::world_comm sub = w.split(w.rank() < p ? 0 : 1, w.rank());
      if (w.rank() < p) {
        strata::grid g(sub, {.pipeline = p});
        if (w.rank() == 0) std::printf("\np = %d\n%4s %10s %10s %10s\n", p, "m", "ideal", "1f1b", "gpipe");
        for (int m : {1, 2, 4, 8, 16}) {
          const auto one = measure<strata::one_f_one_b>(g, cfg, m, steps, rows);
          const auto gp = measure<strata::gpipe>(g, cfg, m, steps, rows);
          if (w.rank() == 0)
            std::printf("%4d %10.3f %10.3f %10.3f\n", m, static_cast<double>(p - 1) / (m + p - 1), one.idle_fraction,
                        gp.idle_fraction);
        }
        const int m = 8;
        const auto one = measure<strata::one_f_one_b>(g, cfg, m, 2, rows);
        const auto gp = measure<strata::gpipe>(g, cfg, m, 2, rows);
        if (w.rank() == 0) {
          std::printf("peak activation MiB per stage at m = %d:\n%6s %10s %10s\n", m, "stage", "gpipe", "1f1b");
          for (int s = 0; s < p; ++s)
            std::printf("%6d %10.3f %10.3f\n", s, gp.activation_mib[static_cast<std::size_t>(s)],
                        one.activation_mib[static_cast<std::size_t>(s)]);
        }
      }
      w.barrier();
    }
    return 0;
  });
}
