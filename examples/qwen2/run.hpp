// examples/qwen2: one fine-tuning run under fixed policies, shared by the host
// translation units (run_fp32.cpp, run_bf16.cpp, run_fp16.cpp: one per precision, so
// that the build compiles them in parallel) and the CUDA ones (run_cuda_<precision>.cu).
#pragma once
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/data/windows.hpp>
#include <strata/models/qwen2.hpp>
#include <strata/models/qwen2_io.hpp>
#include <strata/observe/resident.hpp>
#include <strata/strata.hpp>

#include "../common/config.hpp"
#include "../common/device.hpp"
#include "../common/loop.hpp"

namespace qwen2 {

// Everything the command line decides, read by main.cpp.
struct run_options {
  strata::models::qwen2_config model;
  std::string model_dir;  // empty for random:CONFIG (random initialisation)
  std::string tokenizer_dir;
  std::string data, mask, val, val_mask;
  long val_every = 0, val_steps = 8;
  std::optional<std::uint64_t> shuffle;
  long seq = 256;
  int tp = 1, pp = 1;
  float weight_decay = 0.01f;
  std::string hf_export, export_dtype;
};

struct run_args {
  strata::environment& env;
  const run_options& o;
  const examples::loop_options& lo;
  const strata::trainer_options& opts;
  const examples::config_choice& cc;
  const strata::runtime_policies& pol;
};

// The host runs, one function per precision (run_<precision>.cpp), and the CUDA one
// (run_cuda.cu), which calls its own per precision (run_cuda_<precision>.cu).
int run_host_fp32(const run_args& a);
int run_host_bf16(const run_args& a);
int run_host_fp16(const run_args& a);
int run_cuda(const run_args& a);
int run_cuda_fp32(const run_args& a);
int run_cuda_bf16(const run_args& a);
int run_cuda_fp16(const run_args& a);

// The files a Hugging Face directory needs besides the weights, copied from the model's
// (or --tokenizer's) directory so that the export loads with its tokenizer.
inline constexpr std::array<const char*, 6> tokenizer_files = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
    "merges.txt",     "generation_config.json"};
inline void copy_tokenizer_files(const std::string& from, const std::filesystem::path& to) {
  if (from.empty()) return;
  for (const char* f : tokenizer_files) {
    const auto src = std::filesystem::path(from) / f;
    if (std::filesystem::exists(src))
      std::filesystem::copy_file(src, to / f, std::filesystem::copy_options::overwrite_existing);
  }
}
// --tokenizer names a directory to copy from: one without any of those files is a mistake,
// said before the run rather than an export without its tokenizer after it.
inline void require_tokenizer_dir(const std::string& dir) {
  const bool any = std::any_of(tokenizer_files.begin(), tokenizer_files.end(),
                               [&](const char* f) { return std::filesystem::exists(std::filesystem::path(dir) / f); });
  strata::expects<strata::config_error>(any, [&] {
    std::string names;
    for (const char* f : tokenizer_files) names += std::string(names.empty() ? "" : ", ") + f;
    return "--tokenizer " + dir + ": none of a Hugging Face tokenizer's files is there (" + names + ")";
  });
}

template <class Space, class Sharding, class Precision, class Schedule>
int run(const run_args& a) {
  using namespace strata;
  const run_options& o = a.o;
  grid g(a.env.world(), {.tensor = o.tp, .pipeline = o.pp});
  const int dp = g.dp_size(), rank = a.env.rank();
  a.lo.validate(dp, a.opts.micro_batches);
  // The data first: a bad file fails before the model is allocated.
  const token_file tokens(o.data);
  tokens.check_below(static_cast<std::uint64_t>(o.model.vocab_size), "model's vocab_size");
  token_windows train_windows(tokens, o.seq, a.lo.batch, o.shuffle);
  std::optional<token_file> mask, val, val_mask;
  if (!o.mask.empty()) train_windows.set_mask(mask.emplace(o.mask));
  std::optional<token_windows> val_windows;
  if (!o.val.empty()) {
    val.emplace(o.val).check_below(static_cast<std::uint64_t>(o.model.vocab_size), "model's vocab_size");
    val_windows.emplace(*val, o.seq, a.lo.batch);
    if (!o.val_mask.empty()) val_windows->set_mask(val_mask.emplace(o.val_mask));
  }

  adamw opt = a.cc.cfg ? a.cc.template optimizer<adamw>() : adamw{.weight_decay = o.weight_decay};
  const std::size_t base_rss = strata::resident_bytes();  // before the trainer exists
  trainer<models::qwen2, Space, Sharding, adamw, Precision, Schedule> tr(
      g, models::make_qwen2(o.model, g.tp_rank(), g.tp_size()), a.opts, opt);
  if (!o.model_dir.empty() && a.lo.load.empty()) models::load_qwen2_weights(tr, o.model_dir);

  const auto fill = [&](const token_windows& w, long step, batch<>& b) {
    w.fill(static_cast<std::uint64_t>(step), g.dp_rank(), dp, b.inputs, b.targets);
  };
  // Validation: the mean loss over the first val_steps batches of the validation file.
  nlohmann::json val_losses = nlohmann::json::array();
  batch<> vb;
  const auto validate = [&](long step) {
    if (!val_windows) return;
    const long n = std::max<long>(
        1, std::min<long>(a.o.val_steps,
                          static_cast<long>(val_windows->windows() / static_cast<std::uint64_t>(a.lo.batch))));
    double sum = 0;
    for (long s = 0; s < n; ++s) {
      fill(*val_windows, s, vb);
      sum += tr.evaluate(vb);
    }
    const double loss = sum / static_cast<double>(n);
    val_losses.push_back({{"step", step}, {"loss", loss}});
    if (rank == 0 && !a.lo.quiet) std::printf("validation at step %ld: loss %.6f over %ld batches\n", step, loss, n);
  };

  const double tokens_per_step = static_cast<double>(a.lo.batch) * static_cast<double>(o.seq);
  // The input embedding is a lookup, no FLOPs; the head (a param of its own here, tied or
  // not) is a product and counts.
  const auto& m = o.model;
  const double params = examples::full_param_count(tr) - static_cast<double>(m.vocab_size) * m.hidden_size;
  const double seq = static_cast<double>(o.seq);
  const auto r = examples::train_loop(
      tr, a.lo, rank, seq * train_flops_per_token(params, m.num_hidden_layers, m.hidden_size, seq),
      [&](long step, batch<>& b) { fill(train_windows, step, b); },
      [&](long done) {
        if (o.val_every > 0 && done % o.val_every == 0) validate(done);
      });
  if (val_windows && (o.val_every <= 0 || a.lo.steps % o.val_every != 0)) validate(a.lo.steps);
  if (!o.hf_export.empty()) {
    const dtype as = o.export_dtype == "bf16" ? dtype::bf16 : dtype::f32;
    models::export_qwen2(tr, o.hf_export, o.model, as);
    if (rank == 0) {
      copy_tokenizer_files(o.tokenizer_dir.empty() ? o.model_dir : o.tokenizer_dir, o.hf_export);
      std::printf("exported a Hugging Face directory to %s (%s)\n", o.hf_export.c_str(), o.export_dtype.c_str());
      examples::log_artifacts(r, o.hf_export, "model");
    }
  }

  // Tokens per second over the steps after the first (which pays for first touches).
  double seconds = 0;
  for (std::size_t i = r.seconds.size() > 1 ? 1 : 0; i < r.seconds.size(); ++i) seconds += r.seconds[i];
  const std::size_t timed = r.seconds.size() > 1 ? r.seconds.size() - 1 : r.seconds.size();
  const double tokens_per_s = seconds > 0 ? tokens_per_step * static_cast<double>(timed) / seconds : 0;
  auto per_rank = examples::memory_per_rank(tr, a.env.world(), g.pp_rank(), base_rss);
  if (rank == 0) {
    std::printf("final loss %s  weights_hash %s  tp %d dp %d pp %d  %s/%s/%s  %.0f tokens/s  params %zu\n",
                r.final_loss_text().c_str(), r.hash.c_str(), o.tp, dp, o.pp, Sharding::name, Precision::name,
                Schedule::name, tokens_per_s, r.params);
    auto j = examples::base_report(tr, r, std::move(per_rank));
    j["val_losses"] = val_losses;
    j["tokens_per_s"] = tokens_per_s;
    j["step_seconds"] = r.seconds;
    j["layout"] = {{"tp", o.tp},
                   {"dp", dp},
                   {"pp", o.pp},
                   {"zero", Sharding::name},
                   {"precision", Precision::name},
                   {"schedule", Schedule::name},
                   {"micro_batches", a.opts.micro_batches},
                   {"seq", o.seq},
                   {"batch", a.lo.batch},
                   {"zero_stage", a.pol.zero_stage},
                   {"offload", a.pol.offload},
                   {"recompute", a.opts.recompute}};
    examples::write_report(a.lo.report, j);
  }
  return 0;
}

// Calls run with the sharding and schedule the policies name, in one precision. A device
// trainer runs no pipeline (it refuses pp > 1 itself), so there one schedule is compiled.
template <class Space, class Precision>
int dispatch_run(const run_args& a) {
  if constexpr (std::is_same_v<Space, strata::host>)
    return strata::dispatch_sharding_schedule(a.pol, [&](auto s, auto sc) {
      return run<Space, typename decltype(s)::type, Precision, typename decltype(sc)::type>(a);
    });
  else
    return strata::dispatch_sharding(
        a.pol, [&](auto s) { return run<Space, typename decltype(s)::type, Precision, strata::one_f_one_b>(a); });
}

}  // namespace qwen2
