// The training loop both examples share: the common options (steps, global batch, seed,
// checkpoints, safetensors in and out, report), resuming, periodic saves, progress lines
// and the JSON report with the keys every example writes.
#pragma once
#include <cstdio>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <strata/io/export.hpp>
#include <strata/observe/progress.hpp>
#include <strata/observe/resident.hpp>
#include <strata/train/weights_hash.hpp>

#include "args.hpp"

namespace examples {

struct loop_options {
  long steps = 20;
  long batch = 64;  // global batch: rows per step over all data-parallel ranks
  std::uint64_t seed = 1;
  std::string report, save, load, export_path, init_path;
  long save_every = 0;
  bool quiet = false;
  double tokens_per_sample = 0;  // a language model's sequence: progress in tokens/s

  // Reads the common options with this program's defaults.
  void read(args& a, long default_steps, long default_batch) {
    steps = a.integer("steps", default_steps);
    batch = a.integer("batch", default_batch);
    seed = static_cast<std::uint64_t>(a.integer("seed", 1));
    report = a.str("report", "");
    quiet = a.flag("quiet");
    save = a.str("save", "");
    load = a.str("load", "");
    save_every = a.integer("save-every", 0);
    export_path = a.str("export", "");
    init_path = a.str("init", "");
  }
  void validate(int dp, int micro_batches) const {
    strata::expects<strata::config_error>(steps >= 0, [&] { return strata::cat("--steps ", steps, " is negative"); });
    strata::expects<strata::config_error>(batch > 0 && batch % (static_cast<long>(dp) * micro_batches) == 0, [&] {
      return strata::cat("--batch ", batch,
                         " must be a positive multiple of data-parallel ranks x micro-batches = ", dp, " x ",
                         micro_batches);
    });
  }
};

struct loop_result {
  strata::step_stats last;
  std::vector<float> losses;
  std::vector<double> seconds;  // of each step run
  double idle_seconds = 0, step_seconds = 0;
  std::size_t params = 0;
  std::string hash;
};

// Trains from step 0 (or the loaded checkpoint's step) to o.steps. fill(step, batch)
// produces this rank's rows of that step: the data position is the step, so a resumed
// run sees the same samples as one that never stopped. after_step(steps done) runs after
// each step (validation, say).
template <class Trainer, class Fill, class After = void (*)(long)>
loop_result train_loop(
    Trainer& tr, const loop_options& o, int world_rank, Fill&& fill, After&& after_step = [](long) {}) {
  loop_result r;
  strata::batch<> b;
  long first = 0;
  if (!o.init_path.empty()) strata::import_safetensors(tr, o.init_path);
  if (!o.load.empty()) {
    // --steps counts from step 0: a step-10 checkpoint with --steps 20 runs 10 more.
    tr.load(o.load);
    first = tr.steps_done();
    if (world_rank == 0) std::printf("resumed from step %ld of %s\n", first, o.load.c_str());
  }
  for (long s = first; s < o.steps; ++s) {
    fill(s, b);
    r.last = tr.step(b);
    r.losses.push_back(r.last.loss);
    r.seconds.push_back(r.last.seconds);
    r.idle_seconds += r.last.idle_seconds;
    r.step_seconds += r.last.seconds;
    if (world_rank == 0 && !o.quiet)
      std::printf("%s\n", strata::progress_line(r.last, o.steps, o.tokens_per_sample).c_str());
    const bool periodic = o.save_every > 0 && (s + 1) % o.save_every == 0;
    if (!o.save.empty() && (periodic || s + 1 == o.steps)) tr.save(o.save, {{"data_position", (s + 1) * o.batch}});
    after_step(s + 1);
  }
  if (!o.export_path.empty()) strata::export_safetensors(tr, o.export_path);
  r.hash = strata::hex64(strata::weights_hash_of(tr, &r.params));
  return r;
}

// Every rank's memory report next to its peak resident bytes so far and its resident
// bytes before the trainer was built (base_rss: the program, its libraries, MPI), and its
// pipeline stage, for the report's memory_per_rank: collective over `world`. Called last,
// after any save or export, the peaks cover the whole run.
template <class Trainer, class World>
nlohmann::json memory_per_rank(Trainer& tr, World& world, int pp_rank, std::size_t base_rss) {
  const nlohmann::json mem = tr.memory().to_json();
  const char* const cats[] = {"params",           "grads",           "master",
                              "optimizer_states", "comm_buffers",    "activations",
                              "io_staging",       "offload_staging", "total"};
  std::vector<double> mine;
  for (const char* c : cats) mine.push_back(mem.value(c, 0.0));
  mine.push_back(static_cast<double>(base_rss));
  mine.push_back(static_cast<double>(strata::peak_resident_bytes()));
  mine.push_back(pp_rank);
  const std::size_t per = mine.size();
  std::vector<double> all(per * static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const double>(mine), std::span<double>(all));
  nlohmann::json ranks = nlohmann::json::array();
  for (std::size_t k = 0; k < static_cast<std::size_t>(world.size()); ++k) {
    nlohmann::json rep;
    for (std::size_t c = 0; c < std::size(cats); ++c) rep[cats[c]] = all[k * per + c];
    ranks.push_back({{"rank", k},
                     {"pp_rank", static_cast<int>(all[k * per + per - 1])},
                     {"report", rep},
                     {"peak_rss_bytes", all[k * per + per - 2]},
                     {"base_rss_bytes", all[k * per + per - 3]}});
  }
  return ranks;
}

// The report keys every example writes (the device among them, and memory_per_rank's
// gathering); a program adds its own before write_report.
template <class Trainer>
nlohmann::json base_report(Trainer& tr, const loop_result& r, nlohmann::json per_rank) {
  nlohmann::json j;
  j["device"] = Trainer::space_type::name;
  j["final_loss"] = r.last.loss;
  j["losses"] = r.losses;
  j["weights_hash"] = r.hash;
  // A GEMM's bits depend on how many threads split it: the hash holds at this count.
  j["host_threads"] = strata::host_threads().threads;
  j["blas"] = strata::host_threads().blas;
  j["skipped_steps"] = tr.skipped_steps();
  j["memory"] = tr.memory().to_json();
  j["memory"]["peak_rss_bytes"] = static_cast<double>(strata::peak_resident_bytes());
  j["memory_per_rank"] = std::move(per_rank);
  j["params"] = r.params;
  return j;
}

inline void write_report(const std::string& path, const nlohmann::json& j) {
  if (!path.empty()) std::ofstream(path) << j.dump(2) << "\n";
}

}  // namespace examples
