// bench/trace: what --trace costs a training step of the gpt example's model. One trainer
// runs rounds of steps with tracing off and on, alternating (so drift and warm-up hit both
// alike); the median step times of each and their ratio are printed, with the events a
// traced step records and the trace file's size.
//   mpiexec -n 2 bench/trace [--dim 256 --layers 4 --heads 8 --seq 128 --vocab 512 --batch 16
//                             --micro-batches 2 --zero 1 --rounds 6 --steps 4]
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <strata/strata.hpp>
#include <vector>

#include "../examples/common/args.hpp"
#include "../examples/common/loop.hpp"
#include "../examples/gpt/model.hpp"

namespace {

const char* usage =
    "usage: mpiexec -n N bench/trace [--dim D --layers L --heads H --seq S --vocab V --batch B\n"
    "                                 --micro-batches K --zero 0|1|2|3 --rounds R --steps N]\n"
    "  Trains the gpt example's model with tracing off and on in alternating rounds of N steps\n"
    "  and prints the median step time of each, their ratio and the events a step records.\n";

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<long>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

template <class Sharding>
int measure(strata::environment& env, const gpt::config& cfg, long batch, long rounds, long steps,
            const strata::trainer_options& opts) {
  strata::grid g(env.world());
  strata::trainer<gpt::model, strata::host, Sharding, strata::adamw, strata::fp32> tr(g, gpt::make_model(cfg), opts);
  gpt::synthetic_tokens data(cfg, 5);
  const long local = batch / g.dp_size();
  strata::batch<> b;
  long step = 0;
  auto one_step = [&] {
    data.fill(static_cast<std::uint64_t>(step * batch + g.dp_rank() * local), local, b);
    g.world().barrier();
    double t = tr.step(b).seconds;
    ++step;
    g.world().all_reduce(std::span<double>(&t, 1), strata::reduce_op::max);  // the slowest rank's
    return t;
  };
  for (int i = 0; i < 2; ++i) one_step();  // sizes the activations
  const std::string path =
      (std::filesystem::temp_directory_path() / strata::cat("strata_bench_trace_", getpid(), ".json")).string();
  std::vector<double> off, on;
  std::size_t events = 0, bytes = 0;
  for (long r = 0; r < rounds; ++r) {
    for (long s = 0; s < steps; ++s) off.push_back(one_step());
    strata::trace_session trace(g.world(), path);
    for (long s = 0; s < steps; ++s) on.push_back(one_step());
    events = trace.finish();
    if (env.rank() == 0) bytes = std::filesystem::file_size(path);
  }
  if (env.rank() == 0) {
    std::filesystem::remove(path);
    const double p = examples::full_param_count(tr);
    std::printf(
        "# bench/trace: gpt dim %d layers %d heads %d seq %d vocab %d (%.0f params), %d ranks, %s, batch %ld "
        "x %d micro-batches, %ld rounds x %ld steps each way\n",
        cfg.dim, cfg.layers, cfg.heads, cfg.seq, cfg.vocab, p, env.size(), Sharding::name, batch, opts.micro_batches,
        rounds, steps);
    const double m_off = median(off), m_on = median(on);
    std::printf("%-12s %12s %12s\n", "tracing", "median ms", "vs off");
    std::printf("%-12s %12.2f %12.3f\n", "off", m_off * 1e3, 1.0);
    std::printf("%-12s %12.2f %12.3f\n", "on", m_on * 1e3, m_on / m_off);
    std::printf("# a traced step: %.0f events over %d ranks, %.1f KiB of trace\n",
                static_cast<double>(events) / static_cast<double>(steps), env.size(),
                static_cast<double>(bytes) / static_cast<double>(steps) / 1024);
    std::printf("# overhead of tracing: %+.1f %% of the step time (median on / median off - 1)\n",
                (m_on / m_off - 1) * 100);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  strata::environment env(argc, argv);
  return examples::run_main("bench/trace", usage, env.rank(), argc, argv, [&] {
    examples::args a(argc, argv, {});
    gpt::config cfg;
    cfg.dim = a.count("dim", 256);
    cfg.layers = a.count("layers", 4);
    cfg.heads = a.count("heads", 8);
    cfg.seq = a.count("seq", 128);
    cfg.vocab = a.count("vocab", 512);
    const long batch = a.integer("batch", 16, 1);
    const long rounds = a.integer("rounds", 6, 1), steps = a.integer("steps", 4, 1);
    const int zero = a.count("zero", 1, 0);
    strata::trainer_options opts;
    opts.micro_batches = a.count("micro-batches", 2);
    opts.schedule = strata::lr_schedule::constant(1e-3);
    a.check_all_used();
    strata::expects<strata::config_error>(batch % (static_cast<long>(env.size()) * opts.micro_batches) == 0, [&] {
      return strata::cat("--batch ", batch, " must be a multiple of ranks x micro-batches");
    });
    switch (zero) {
      case 0: return measure<strata::replicated>(env, cfg, batch, rounds, steps, opts);
      case 1: return measure<strata::zero<1>>(env, cfg, batch, rounds, steps, opts);
      case 2: return measure<strata::zero<2>>(env, cfg, batch, rounds, steps, opts);
      case 3: return measure<strata::zero<3>>(env, cfg, batch, rounds, steps, opts);
    }
    throw examples::usage_error(strata::cat("--zero ", zero, " is not 0, 1, 2 or 3"));
  });
}
