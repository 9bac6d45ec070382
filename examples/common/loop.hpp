// The training loop both examples share: the common options (steps, global batch, seed,
// checkpoints, safetensors in and out, report), resuming, periodic saves, progress lines,
// an MLflow run, and the JSON report with the keys every example writes.
#pragma once
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include <strata/comm/environment.hpp>
#include <strata/io/export.hpp>
#include <strata/observe/flops.hpp>
#include <strata/observe/gpu_peaks.hpp>
#if STRATA_HAS_MLFLOW
#include <strata/observe/mlflow.hpp>
#endif
#include <strata/observe/progress.hpp>
#include <strata/observe/resident.hpp>
#include <strata/observe/trace_file.hpp>
#include <strata/space/device_memory.hpp>
#include <strata/train/batch.hpp>
#include <strata/train/options.hpp>
#include <strata/train/report.hpp>
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
  long log_every = 1;            // a progress line every N steps
  std::string metrics;           // JSON Lines of every step
  std::string trace;             // Chrome trace JSON of the run
  bool profile = false;          // where each logged step's time went (trainer_options::profile)
  double peak_flops = 0;         // one process's peak, for MFU (0: measured on the host)
  // MLflow: the tracking server (default $MLFLOW_TRACKING_URI), the experiment (default
  // $MLFLOW_EXPERIMENT_NAME, else "strata"), the run's name; config: --config's file,
  // whose keys become the run's ds_config.* params.
  std::string mlflow, experiment, run_name, config;
  std::string mlflow_note;  // why $MLFLOW_TRACKING_URI was not used (rank 0 prints it)

  // Reads the common options with this program's defaults.
  void read(args& a, long default_steps, long default_batch) {
    steps = a.integer("steps", default_steps, 0);
    batch = a.integer("batch", default_batch, 1);
    seed = static_cast<std::uint64_t>(a.integer("seed", 1, 0));
    report = a.str("report", "");
    quiet = a.flag("quiet");
    save = a.str("save", "");
    load = a.str("load", "");
    save_every = a.integer("save-every", 0, 0);
    export_path = a.str("export", "");
    init_path = a.str("init", "");
    log_every = a.integer("log-every", 1, 1);
    metrics = a.str("metrics", "");
    trace = a.str("trace", "");
    profile = a.flag("profile");
    peak_flops = a.real("peak-flops", 0.0);
    const auto env_or = [](const char* name, const char* def) {
      const char* v = std::getenv(name);
      return std::string(v && *v ? v : def);
    };
    mlflow = a.str("mlflow", env_or("MLFLOW_TRACKING_URI", ""));
    // An MLflow user's shell may name a store strata cannot reach ("databricks", a file
    // path): from the environment that is a note and no tracking; given as --mlflow, an error.
    if (!a.has("mlflow") && !mlflow.empty() && mlflow.rfind("http://", 0) != 0 && mlflow.rfind("https://", 0) != 0) {
      mlflow_note = "MLFLOW_TRACKING_URI=" + mlflow + " is not an http(s) tracking server: this run is not tracked";
      mlflow.clear();
    }
    experiment = a.str("experiment", env_or("MLFLOW_EXPERIMENT_NAME", "strata"));
    run_name = a.str("run-name", "");
    config = a.str("config", "");
#if !STRATA_HAS_MLFLOW
    if (a.has("mlflow"))
      throw strata::config_error("--mlflow: this build has no MLflow client (libcurl was not found when it was built)");
#endif
    if (mlflow.empty() && (a.has("experiment") || a.has("run-name")))
      throw usage_error("--experiment and --run-name name an MLflow run: give --mlflow URI too");
  }
  void validate(int dp, int micro_batches) const {
    strata::expects<strata::config_error>(steps >= 0, [&] { return strata::cat("--steps ", steps, " is negative"); });
    strata::expects<strata::config_error>(
        batch > 0 && dp >= 1 && micro_batches >= 1 && batch % (static_cast<long>(dp) * micro_batches) == 0, [&] {
          return strata::cat("--batch ", batch,
                             " must be a positive multiple of data-parallel ranks x micro-batches = ", dp, " x ",
                             micro_batches);
        });
    strata::expects<strata::config_error>(log_every >= 1,
                                          [&] { return strata::cat("--log-every ", log_every, " is not >= 1"); });
    strata::expects<strata::config_error>(peak_flops >= 0,
                                          [&] { return strata::cat("--peak-flops ", peak_flops, " is negative"); });
  }
};

// Every param's full tensor counted once per param (a tied copy is a param of its own).
// Templated on the model, not the trainer: one walk whatever trainers a program builds.
template <class Model>
double model_param_count(Model& m) {
  double n = 0;
  strata::for_each_param(m, [&](const auto& p, std::string_view) {
    n += static_cast<double>(p.sharded() ? p.full_shape.numel() : p.numel());
  });
  return n;
}
template <class Trainer>
double full_param_count(Trainer& tr) {
  return model_param_count(tr.model());
}

// A device trainer's measured device memory; nothing for a host trainer.
template <class Trainer>
std::optional<strata::device_memory> device_memory_of(Trainer& tr) {
  if constexpr (requires { tr.device_memory(); })
    return tr.device_memory();
  else
    return std::nullopt;
}

// What the loop, its reports and its MLflow run need of a trainer, behind virtual calls:
// they are compiled once, not once for every trainer type a program dispatches over
// (63 in examples/mlp), which is what its compile time went to.
class trainer_handle {
 public:
  virtual ~trainer_handle() = default;
  virtual strata::step_stats step(const strata::batch<>& b) = 0;
  virtual strata::memory_report memory() const = 0;
  // A device trainer's measured device memory (trainer::device_memory()); none on the host.
  virtual std::optional<strata::device_memory> device_memory() = 0;
  virtual void save(const std::string& dir, nlohmann::json extra) = 0;
  virtual void load(const std::string& dir) = 0;
  virtual long steps_done() const = 0;
  virtual void import_safetensors(const std::string& path) = 0;
  virtual void export_safetensors(const std::string& path) = 0;
  virtual std::uint64_t weights_hash(std::size_t* elements) = 0;
  virtual const strata::step_profile& last_profile() const = 0;

  strata::world_comm* world = nullptr;
  int tp = 1, dp = 1, pp = 1;
  std::string space, sharding, optimizer, precision, schedule;
  strata::trainer_options options;
  double peak_flops = 0;  // of one process (peak_flops_of)
};

template <class Trainer>
class handle_of final : public trainer_handle {
 public:
  explicit handle_of(Trainer& tr) : tr_(tr) {
    auto& g = tr.grid_ref();
    world = &g.world();
    tp = g.tp_size();
    dp = g.dp_size();
    pp = g.pp_size();
    using S = typename Trainer::sharding;
    space = Trainer::space_type::name;
    sharding = std::string(S::name) + (S::offload ? "+offload" : "");
    optimizer = Trainer::optimizer_type::name;
    precision = Trainer::precision::name;
    schedule = Trainer::schedule::name;
    options = tr.options();
  }
  strata::step_stats step(const strata::batch<>& b) override { return tr_.step(b); }
  strata::memory_report memory() const override { return tr_.memory(); }
  std::optional<strata::device_memory> device_memory() override { return device_memory_of(tr_); }
  void save(const std::string& dir, nlohmann::json extra) override { tr_.save(dir, std::move(extra)); }
  void load(const std::string& dir) override { tr_.load(dir); }
  long steps_done() const override { return tr_.steps_done(); }
  void import_safetensors(const std::string& path) override { strata::import_safetensors(tr_, path); }
  void export_safetensors(const std::string& path) override { strata::export_safetensors(tr_, path); }
  std::uint64_t weights_hash(std::size_t* elements) override { return strata::weights_hash_of(tr_, elements); }
  const strata::step_profile& last_profile() const override { return tr_.last_profile(); }

 private:
  Trainer& tr_;
};

// The functions below that take a trainer_handle (or a memory report) are templates only
// so that a program that includes this header without calling them (a benchmark) does
// not compile them; each is instantiated once, for trainer_handle.

// What the metrics file's header says of a run: layout, policies, options, threads.
template <class Handle>
nlohmann::json run_header(const Handle& h, const loop_options& o) {
  const auto& opts = h.options;
  return {{"world_size", h.world->size()},
          {"layout", {{"tp", h.tp}, {"dp", h.dp}, {"pp", h.pp}}},
          {"policies",
           {{"space", h.space},
            {"sharding", h.sharding},
            {"optimizer", h.optimizer},
            {"precision", h.precision},
            {"schedule", h.schedule}}},
          {"options",
           {{"steps", o.steps},
            {"batch", o.batch},
            {"micro_batches", opts.micro_batches},
            {"lr", opts.lr},
            {"max_grad_norm", opts.max_grad_norm},
            {"bucket_elems", opts.bucket_elems},
            {"seed", opts.seed},
            {"recompute", opts.recompute},
            {"offload_params", opts.offload_params}}},
          {"host_threads", strata::host_threads().threads},
          {"blas", strata::host_threads().blas},
          {"simd", strata::host_threads().simd}};
}

// The peak FLOP/s of one process, for MFU: --peak-flops; on a GPU its datasheet peak
// for the run's precision (observe/gpu_peaks.hpp; 0, no MFU, for a device not in the
// table); on the host the BLAS's best GEMM measured on every rank at once (they share the cores).
template <class Trainer>
double peak_flops_of(Trainer& tr, const loop_options& o) {
  if (o.peak_flops > 0) return o.peak_flops;
  using space = typename Trainer::space_type;
  if constexpr (!std::is_same_v<space, strata::host>) {
    if constexpr (requires { space::device_name(); }) {
      const std::string name = space::device_name();
      const double peak =
          strata::gpu_peak_flops(name, std::string_view(Trainer::precision::name) != std::string_view("fp32"));
      if (peak == 0 && tr.grid_ref().world().rank() == 0 && !o.quiet)
        std::printf("no peak FLOP/s known for %s: give --peak-flops for MFU\n", name.c_str());
      return peak;
    }
    return 0;
  }
  tr.grid_ref().world().barrier();
  double peak = strata::measure_host_peak_flops();
  tr.grid_ref().world().all_reduce(std::span<double>(&peak, 1), strata::reduce_op::avg);
  return peak;
}

struct loop_result {
  strata::step_stats last;
  std::vector<float> losses;
  std::vector<double> seconds;  // of each step run
  double idle_seconds = 0, step_seconds = 0;
  std::size_t params = 0;
  std::string hash;
  // The last step's loss for the final line, or why there is none (--steps 0, or a
  // checkpoint already at --steps): never a 0 that reads as a loss.
  std::string final_loss_text() const {
    if (losses.empty()) return "none (no step ran)";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(last.loss));
    return buf;
  }
#if STRATA_HAS_MLFLOW
  // Rank 0's MLflow run, open until the result goes: FINISHED then, or FAILED if an
  // exception unwinds it.
  std::unique_ptr<strata::mlflow_run> mlflow;
#endif
};

// Logs a file or directory the program wrote after the loop (qwen2's export) into the
// run's artifacts under `dir`; nothing without an MLflow run.
inline void log_artifacts([[maybe_unused]] const loop_result& r, [[maybe_unused]] const std::string& path,
                          [[maybe_unused]] const std::string& dir) {
#if STRATA_HAS_MLFLOW
  if (r.mlflow) r.mlflow->log_artifacts(path, dir);
#endif
}

#if STRATA_HAS_MLFLOW
// Rank 0's run in the tracking server, its params the metrics header and the config
// file's keys; nullptr without --mlflow or off rank 0.
inline std::unique_ptr<strata::mlflow_run> open_mlflow(const loop_options& o, int world_rank,
                                                       const nlohmann::json& header) {
  if (world_rank != 0) return nullptr;
  if (!o.mlflow_note.empty()) std::fprintf(stderr, "strata: note: %s\n", o.mlflow_note.c_str());
  if (o.mlflow.empty()) return nullptr;
  nlohmann::json params = header;
  if (!o.config.empty()) {
    std::ifstream in(o.config);
    params["ds_config"] = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  return std::make_unique<strata::mlflow_run>(
      strata::mlflow_options{.uri = o.mlflow, .experiment = o.experiment, .run_name = o.run_name}, params);
}
#endif

// --report is written by rank 0 once the run is over: a place it cannot be written is
// said before the first step (on every rank, so that none waits for the others), not
// after the run.
inline void check_report_path(strata::world_comm& world, const std::string& path) {
  int failed = 0;
  if (world.rank() == 0 && !path.empty()) {
    const std::filesystem::path p(path), parent = p.parent_path().empty() ? "." : p.parent_path();
    std::error_code ec;
    failed = std::filesystem::is_directory(parent, ec) && !std::filesystem::is_directory(p, ec) &&
                     ::access(parent.c_str(), W_OK) == 0
                 ? 0
                 : 1;
  }
  world.broadcast(std::span<int>(&failed, 1), 0);
  strata::expects<strata::config_error>(failed == 0, [&] {
    return "--report " + path +
           ": cannot be written there (its directory must exist and be writable, and the path "
           "must not be a directory)";
  });
}

// Trains from step 0 (or the loaded checkpoint's step) to o.steps. fill(step, batch)
// produces this rank's rows of that step: the data position is the step, so a resumed
// run sees the same samples as one that never stopped. after_step(steps done) runs after
// each step (validation, say). flops_per_sample (observe/flops.hpp) gives the progress
// line its MFU.
template <class Handle>
loop_result train_loop_on(Handle& tr, const loop_options& o, int world_rank, double flops_per_sample,
                          const std::function<void(long, strata::batch<>&)>& fill,
                          const std::function<void(long)>& after_step) {
  strata::progress_options po;
  po.every = o.log_every;
  po.quiet = o.quiet;
  po.tokens_per_sample = o.tokens_per_sample;
  po.flops_per_sample = flops_per_sample;
  po.peak_flops = tr.peak_flops;
  po.metrics_path = o.metrics;
  const nlohmann::json header = run_header(tr, o);
  loop_result r;
#if STRATA_HAS_MLFLOW
  r.mlflow = open_mlflow(o, world_rank, header);
  if (r.mlflow) po.on_step = [&r](const nlohmann::json& record, long step) { r.mlflow->log_metrics(record, step); };
#endif
  check_report_path(*tr.world, o.report);
  strata::progress_log progress(*tr.world, po, header);
  strata::trace_session trace(*tr.world, o.trace);
  strata::batch<> b;
  long first = 0;
  if (!o.init_path.empty()) tr.import_safetensors(o.init_path);
  if (!o.load.empty()) {
    // --steps counts from step 0: a step-10 checkpoint with --steps 20 runs 10 more.
    tr.load(o.load);
    first = tr.steps_done();
    if (world_rank == 0) std::printf("resumed from step %ld of %s\n", first, o.load.c_str());
  }
  for (long s = first; s < o.steps; ++s) {
    {
      strata::trace_scope data(strata::trace_track::data, "batch");
      fill(s, b);
    }
    r.last = tr.step(b);
    r.losses.push_back(r.last.loss);
    r.seconds.push_back(r.last.seconds);
    r.idle_seconds += r.last.idle_seconds;
    r.step_seconds += r.last.seconds;
    progress.step(r.last, o.steps, tr.memory().total(), tr.device_memory());
    if (tr.options.profile && world_rank == 0 && !o.quiet && ((s + 1) % o.log_every == 0 || s + 1 == o.steps))
      std::printf("profile of step %ld:\n%s", s + 1, strata::profile_table(tr.last_profile()).c_str());
    const bool periodic = o.save_every > 0 && (s + 1) % o.save_every == 0;
    if (!o.save.empty() && (periodic || s + 1 == o.steps)) tr.save(o.save, {{"data_position", (s + 1) * o.batch}});
    after_step(s + 1);
  }
  if (!o.quiet) progress.summary();
  if (!o.export_path.empty()) {
    tr.export_safetensors(o.export_path);
    log_artifacts(r, o.export_path, "model");
  }
  r.hash = strata::hex64(tr.weights_hash(&r.params));
  const std::size_t events = trace.finish();
  if (world_rank == 0 && !o.trace.empty() && !o.quiet)
    std::printf("trace: %zu events in %s (open it in ui.perfetto.dev or chrome://tracing)\n", events, o.trace.c_str());
  return r;
}

template <class Trainer, class Fill, class After = void (*)(long)>
loop_result train_loop(
    Trainer& tr, const loop_options& o, int world_rank, double flops_per_sample, Fill&& fill,
    After&& after_step = [](long) {}) {
  handle_of<Trainer> h(tr);
  h.peak_flops = peak_flops_of(tr, o);
  return train_loop_on<trainer_handle>(h, o, world_rank, flops_per_sample, fill, after_step);
}

// Every rank's memory report next to its peak resident bytes so far and its resident
// bytes before the trainer was built (base_rss: the program, its libraries, MPI), and its
// pipeline stage, for the report's memory_per_rank: collective over `world`. Called last,
// after any save or export, the peaks cover the whole run. A device trainer's ranks also
// carry "device", their measured device memory (space/device_memory.hpp's to_json),
// which `qwen2 --check-memory` holds to the report's device part.
template <class Report>
nlohmann::json memory_per_rank_from(const Report& report, strata::world_comm& world, int pp_rank, std::size_t base_rss,
                                    const std::optional<strata::device_memory>& device = std::nullopt) {
  const nlohmann::json mem = report.to_json();
  const char* const cats[] = {"params",       "param_shard", "grads",      "master",          "optimizer_states",
                              "comm_buffers", "activations", "io_staging", "offload_staging", "total"};
  std::vector<double> mine;
  for (const char* c : cats) mine.push_back(mem.value(c, 0.0));
  mine.push_back(static_cast<double>(base_rss));
  mine.push_back(static_cast<double>(strata::peak_resident_bytes()));
  mine.push_back(device ? 1.0 : 0.0);
  const auto dev = device ? device->values() : std::array<double, strata::device_memory::fields>{};
  mine.insert(mine.end(), dev.begin(), dev.end());
  const std::size_t at_device = std::size(cats) + 2;  // the flag, then the record
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
                     {"peak_rss_bytes", all[k * per + std::size(cats) + 1]},
                     {"base_rss_bytes", all[k * per + std::size(cats)]}});
    if (all[k * per + at_device] > 0)
      ranks.back()["device"] =
          strata::device_memory::from_values(std::span(all).subspan(k * per + at_device + 1, dev.size())).to_json();
  }
  return ranks;
}
template <class Trainer>
nlohmann::json memory_per_rank(Trainer& tr, strata::world_comm& world, int pp_rank, std::size_t base_rss) {
  return memory_per_rank_from(tr.memory(), world, pp_rank, base_rss, device_memory_of(tr));
}

// The report keys every example writes (the device among them, and memory_per_rank's
// gathering); a program adds its own before write_report.
template <class Report>
nlohmann::json base_report_from(const char* device, const std::vector<long>& skipped, const Report& memory,
                                const loop_result& r, nlohmann::json per_rank) {
  nlohmann::json j;
  j["device"] = device;
  j["final_loss"] = r.losses.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.last.loss);
  j["losses"] = r.losses;
  j["weights_hash"] = r.hash;
  // A GEMM's bits depend on how many threads split it, and a row's sums on the SIMD
  // width: the hash holds at this count and instruction set.
  j["host_threads"] = strata::host_threads().threads;
  j["blas"] = strata::host_threads().blas;
  j["simd"] = strata::host_threads().simd;
  j["skipped_steps"] = skipped;
  j["memory"] = memory.to_json();
  j["memory"]["peak_rss_bytes"] = static_cast<double>(strata::peak_resident_bytes());
  j["memory_per_rank"] = std::move(per_rank);
  j["params"] = r.params;
  {
    strata::environment env;  // the job's own, shared: how it was launched
    j["launch"] = {{"launcher", std::string(strata::name_of(env.launch().kind))},
                   {"source", env.launch().source},
                   {"processes", env.size()},
                   {"backend", std::string(env.world().backend())}};
  }
  return j;
}
template <class Trainer>
nlohmann::json base_report(Trainer& tr, const loop_result& r, nlohmann::json per_rank) {
  return base_report_from(Trainer::space_type::name, tr.skipped_steps(), tr.memory(), r, std::move(per_rank));
}

inline void write_report(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << j.dump(2) << "\n";
  f.close();
  if (!f) throw strata::error("--report " + path + ": cannot be written");
}

}  // namespace examples
