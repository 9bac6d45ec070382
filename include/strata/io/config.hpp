// A DeepSpeed ds_config.json (plus a "strata" section for tensor / pipeline parallel)
// read into a run_config: plain data, which train/from_config.hpp maps onto the trainer.
#pragma once
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../kernels/rounding.hpp"
#include "../optim/adamw.hpp"
#include "../optim/lion.hpp"
#include "../optim/loss_scaler.hpp"
#include "../optim/schedule.hpp"
#include "../optim/sgd.hpp"
#include "../parallel/bucket_plan.hpp"
#include "config_auto.hpp"
#include "detail/json_reader.hpp"

namespace strata {

// What a config file says. Defaults are DeepSpeed's where DeepSpeed has one, except
// reduce_bucket_size, which keeps strata's (DeepSpeed's 5e8 elements would be a 2 GB
// fp32 buffer per rank).
//
// "auto" (the Hugging Face Trainer's placeholder): given the program's
// config_auto_values (io/config_auto.hpp), parse_config and load_config first fill it as
// the Trainer does. What is still "auto" then: for train_batch_size,
// train_micro_batch_size_per_gpu and gradient_accumulation_steps it means "not given"
// and resolve() derives it as DeepSpeed does; for reduce_bucket_size,
// stage3_prefetch_bucket_size and stage3_param_persistence_threshold (which change
// speed, never results) it keeps the default; anywhere else it is a config_error, since
// only the program knows the value meant.
struct run_config {
  // As given (nullopt = absent or "auto"); resolve() fills `batch`.
  std::optional<long> train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps;
  struct resolved_batch {
    long train_batch_size = 0, micro_batch_size = 0, gradient_accumulation_steps = 0;
    int dp_world = 0;
  };
  std::optional<resolved_batch> batch;

  // zero_optimization
  int zero_stage = 0;
  bool offload_optimizer = false;  // offload_optimizer.device "cpu"
  bool offload_param = false;      // offload_param.device "cpu" (ZeRO-3; see offload_param_note)
  std::size_t reduce_bucket_size = default_bucket_elems;
  std::size_t stage3_prefetch_bucket_size = 50'000'000;
  std::size_t stage3_param_persistence_threshold = 100'000;
  bool overlap_comm = false;  // DeepSpeed: true for stage 3 unless given

  bool fp16 = false, bf16 = false;
  loss_scaler_options loss_scaler{};
  float gradient_clipping = 0.0f;

  // optimizer: "adamw" (DeepSpeed's Adam and AdamW: decoupled weight decay, as its
  // FusedAdam with adam_w_mode), "sgd" or "lion", with the hyperparameters of each;
  // weight_decay defaults to 0 as in DeepSpeed's fused optimizers.
  std::string optimizer = "adamw";
  float lr = 1e-3f;
  adamw adamw_params{.weight_decay = 0.0f};
  sgd sgd_params{};
  lion lion_params{};
  std::string scheduler;  // "" (constant lr), WarmupLR, WarmupDecayLR, WarmupCosineLR
  lr_schedule schedule = lr_schedule::constant(1e-3);

  int steps_per_print = 10;

  // "strata": {...}
  int tensor_parallel_size = 1, pipeline_parallel_size = 1;
  std::string pipeline_schedule = "1f1b";  // gpipe | 1f1b
  std::uint64_t seed = 0;
  strata::rounding rounding = strata::rounding::nearest_even;

  // Keys strata read but does not use, as dotted paths, sorted.
  std::vector<std::string> unknown_keys;
  // DeepSpeed keys the file gives a value that strata reads (and prints back) but that
  // change nothing in how it runs, each with why, in the order read (no_effect_keys_note).
  struct no_effect_key {
    std::string key, why;
  };
  std::vector<no_effect_key> no_effect_keys;
  // Keys the file left "auto" that were filled from the program's config_auto_values, sorted.
  std::vector<std::string> auto_filled;

  std::string precision() const { return fp16 ? "fp16" : bf16 ? "bf16" : "fp32"; }

  // Completes the batch sizes for `dp_world` data-parallel ranks as DeepSpeed does (the
  // missing one derived by integer division, a lone train_batch_size or micro batch
  // meaning no accumulation), then requires
  // train_batch_size == micro batch * accumulation steps * dp_world.
  const resolved_batch& resolve(int dp_world) {
    if (dp_world < 1) throw config_error(strata::cat("config: the data-parallel size must be >= 1, got ", dp_world));
    const long w = dp_world;
    const auto& tb = train_batch_size;
    const auto& mb = train_micro_batch_size_per_gpu;
    const auto& ga = gradient_accumulation_steps;
    resolved_batch r;
    r.dp_world = dp_world;
    std::string derived;
    if (tb && mb && ga) {
      r = {*tb, *mb, *ga, dp_world};
    } else if (tb && mb) {
      r = {*tb, *mb, *tb / *mb / w, dp_world};
      derived = "gradient_accumulation_steps";
    } else if (tb && ga) {
      r = {*tb, *tb / w / *ga, *ga, dp_world};
      derived = "train_micro_batch_size_per_gpu";
    } else if (mb && ga) {
      r = {product(*mb, *ga, w), *mb, *ga, dp_world};
    } else if (tb) {
      r = {*tb, *tb / w, 1, dp_world};
      derived = "train_micro_batch_size_per_gpu";
    } else if (mb) {
      r = {product(*mb, 1, w), *mb, 1, dp_world};
    } else {
      throw config_error("config: train_batch_size or train_micro_batch_size_per_gpu must be given");
    }
    auto shown = [&](std::string_view key, long v) {
      return derived == key ? strata::cat(key, " (derived: ", v, ")") : strata::cat(key, " (", v, ")");
    };
    const long want = product(r.micro_batch_size, r.gradient_accumulation_steps, w);
    if (r.train_batch_size != want)
      throw config_error(strata::cat("config: train_batch_size (", r.train_batch_size, ") must equal ",
                                     shown("train_micro_batch_size_per_gpu", r.micro_batch_size), " * ",
                                     shown("gradient_accumulation_steps", r.gradient_accumulation_steps),
                                     " * data-parallel size (", dp_world, ") = ", want));
    batch = r;
    return *batch;
  }

 private:
  static long product(long a, long b, long c) {
    long ab = 0, abc = 0;
    if (__builtin_mul_overflow(a, b, &ab) || __builtin_mul_overflow(ab, c, &abc))
      throw config_error(strata::cat("config: the global batch ", a, " * ", b, " * ", c, " overflows"));
    return abc;
  }
};

namespace detail {

inline void read_batch(json_reader& r, run_config& c) {
  constexpr long long big = std::numeric_limits<int>::max();
  if (auto v = r.integer("train_batch_size", 1, big, auto_value::absent)) c.train_batch_size = *v;
  if (auto v = r.integer("train_micro_batch_size_per_gpu", 1, big, auto_value::absent))
    c.train_micro_batch_size_per_gpu = *v;
  if (auto v = r.integer("gradient_accumulation_steps", 1, big, auto_value::absent)) c.gradient_accumulation_steps = *v;
  if (auto v = r.number("gradient_clipping", 0.0, std::numeric_limits<float>::max(), "a number >= 0"))
    c.gradient_clipping = static_cast<float>(*v);
  if (auto v = r.integer("steps_per_print", 1, big)) {
    c.steps_per_print = static_cast<int>(*v);
    c.no_effect_keys.push_back(
        {"steps_per_print", "strata logs nothing itself; the trainer returns each step's stats"});
  }
}

inline void read_zero(json_reader& root, run_config& c) {
  json_reader z = child(root, "zero_optimization");
  constexpr long long big = std::numeric_limits<long long>::max();
  if (auto v = z.integer("stage", 0, 3)) c.zero_stage = static_cast<int>(*v);
  if (auto v = z.boolean("cpu_offload")) c.offload_optimizer = *v;  // DeepSpeed's older spelling
  if (z.has("offload_optimizer")) {
    json_reader o = child(z, "offload_optimizer");
    if (auto d = o.one_of("device", {"cpu", "none"})) c.offload_optimizer = *d == "cpu";
  }
  if (z.has("offload_param")) {
    json_reader o = child(z, "offload_param");
    if (auto d = o.one_of("device", {"cpu", "nvme", "none"}); d && *d == "nvme")
      o.fail("device", "is \"nvme\": strata keeps offloaded state in host memory (\"cpu\"), not on NVMe");
    else if (d)
      c.offload_param = *d == "cpu";
  }
  if (auto v = z.integer("reduce_bucket_size", 1, big, auto_value::absent))
    c.reduce_bucket_size = static_cast<std::size_t>(*v);
  if (auto v = z.integer("stage3_prefetch_bucket_size", 0, big, auto_value::absent)) {
    c.stage3_prefetch_bucket_size = static_cast<std::size_t>(*v);
    c.no_effect_keys.push_back(
        {"zero_optimization.stage3_prefetch_bucket_size", "ZeRO-3 gathers the next reduce_bucket_size bucket ahead"});
  }
  if (auto v = z.integer("stage3_param_persistence_threshold", 0, big, auto_value::absent)) {
    c.stage3_param_persistence_threshold = static_cast<std::size_t>(*v);
    c.no_effect_keys.push_back(
        {"zero_optimization.stage3_param_persistence_threshold", "every param is sharded at ZeRO-3, however small"});
  }
  const auto overlap = z.boolean("overlap_comm");
  c.overlap_comm = overlap.value_or(c.zero_stage == 3);
  if (overlap)
    c.no_effect_keys.push_back(
        {"zero_optimization.overlap_comm", "each gradient bucket's reduce-scatter always overlaps the backward"});
  if (c.offload_optimizer && c.zero_stage == 0)
    z.fail("offload_optimizer.device", "\"cpu\" needs zero_optimization.stage 1, 2 or 3 (got 0)");
  if (c.offload_param && c.zero_stage != 3)
    z.fail("offload_param.device",
           cat("\"cpu\" needs zero_optimization.stage 3, as in DeepSpeed (got ", c.zero_stage, ")"));
}

inline void read_precision(json_reader& root, run_config& c) {
  if (root.has("fp16")) {
    json_reader f = child(root, "fp16");
    c.fp16 = f.boolean("enabled").value_or(false);
    auto& o = c.loss_scaler;
    if (auto v = f.number("loss_scale", 0.0, std::numeric_limits<float>::max(), "a number >= 0 (0 = dynamic)"))
      o.loss_scale = static_cast<float>(*v);
    if (auto v = f.integer("initial_scale_power", 0, 126)) o.initial_scale_power = static_cast<int>(*v);
    if (auto v = f.integer("loss_scale_window", 1, std::numeric_limits<long>::max())) o.loss_scale_window = *v;
    if (auto v = f.integer("hysteresis", 1, std::numeric_limits<int>::max())) o.hysteresis = static_cast<int>(*v);
    if (auto v = f.boolean("consecutive_hysteresis")) o.consecutive_hysteresis = *v;
    // Bounded by what a float holds: a double just above 0 would round to 0 in the scaler.
    if (auto v = f.number("min_loss_scale", std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max(),
                          "a number > 0 (a 32-bit float: at least 1.4e-45)"))
      o.min_loss_scale = static_cast<float>(*v);
  }
  // DeepSpeed still reads the section under its old name "bfloat16" when "bf16" is absent.
  const char* bf = root.has("bf16") || !root.has("bfloat16") ? "bf16" : "bfloat16";
  if (root.has(bf)) {
    json_reader b = child(root, bf);
    c.bf16 = b.boolean("enabled").value_or(false);
  }
  if (c.fp16 && c.bf16)
    throw config_error(cat(root.prefix(), ": fp16.enabled and ", bf, ".enabled are both true; enable one of them"));
}

// [beta1, beta2], each in [0, 1).
inline void read_betas(json_reader& p, float& b1, float& b2) {
  const auto* j = p.find("betas");
  if (!j) return;
  const char* want = "[beta1, beta2] with each in [0, 1)";
  if (!j->is_array() || j->size() != 2 || !(*j)[0].is_number() || !(*j)[1].is_number()) p.expected("betas", want, *j);
  const double x = (*j)[0].get<double>(), y = (*j)[1].get<double>();
  if (!(x >= 0.0 && x < 1.0 && y >= 0.0 && y < 1.0)) p.expected("betas", want, *j);
  b1 = static_cast<float>(x);
  b2 = static_cast<float>(y);
  // The optimizer computes in 32-bit floats, where 0.99999999 is 1.
  if (b1 >= 1.0f || b2 >= 1.0f)
    p.fail("betas", cat("has a beta that is 1 as a 32-bit float, got ", detail::json_reader::show(*j),
                        "; the largest below 1 is 0.99999994"));
}

inline void read_optimizer(json_reader& root, run_config& c) {
  if (!root.has("optimizer")) return;
  json_reader o = child(root, "optimizer");
  const auto type = o.one_of("type", {"Adam", "AdamW", "SGD", "Lion"}, true);
  if (!type) o.fail("type", "is missing (one of \"Adam\", \"AdamW\", \"SGD\", \"Lion\")");
  json_reader p = child(o, "params");
  constexpr double fmax = std::numeric_limits<float>::max();
  auto nonneg = [&](std::string_view k, float& out) {
    if (auto v = p.number(k, 0.0, fmax, "a number >= 0")) out = static_cast<float>(*v);
  };
  nonneg("lr", c.lr);
  if (*type == "Adam" || *type == "AdamW") {
    c.optimizer = "adamw";
    auto& a = c.adamw_params;
    read_betas(p, a.beta1, a.beta2);
    nonneg("eps", a.eps);
    nonneg("weight_decay", a.weight_decay);
    if (auto v = p.boolean("bias_correction")) a.bias_correction = *v;
    if (auto v = p.boolean("amsgrad"); v && *v) p.fail("amsgrad", "is true: strata's Adam has no AMSGrad variant");
    if (*type == "Adam")
      if (auto v = p.boolean("adam_w_mode"); v && !*v && a.weight_decay != 0.0f)
        p.fail("adam_w_mode",
               "is false with weight_decay > 0 (Adam with L2 decay): strata implements decoupled "
               "decay only; use AdamW, or weight_decay 0");
  } else if (*type == "SGD") {
    c.optimizer = "sgd";
    auto& s = c.sgd_params;
    nonneg("momentum", s.momentum);
    nonneg("dampening", s.dampening);
    nonneg("weight_decay", s.weight_decay);
    if (auto v = p.boolean("nesterov")) s.nesterov = *v;
    if (s.nesterov && (s.momentum <= 0.0f || s.dampening != 0.0f))
      p.fail("nesterov", "is true, which needs momentum > 0 and dampening 0");
  } else {
    c.optimizer = "lion";
    read_betas(p, c.lion_params.beta1, c.lion_params.beta2);
    nonneg("weight_decay", c.lion_params.weight_decay);
  }
}

inline void read_scheduler(json_reader& root, run_config& c) {
  if (!root.has("scheduler")) {
    c.schedule = lr_schedule::constant(c.lr);
    return;
  }
  json_reader s = child(root, "scheduler");
  const auto type = s.one_of("type", {"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"});
  if (!type) s.fail("type", "is missing (one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\")");
  c.scheduler = *type;
  json_reader p = child(s, "params");
  constexpr long long big = std::numeric_limits<long>::max();
  // DeepSpeed takes 0 (the Trainer's default warmup) and warms up over max(2, N) steps,
  // so 0 is 1 for lr_schedule, which wants N >= 1.
  const long warmup = std::max(1L, static_cast<long>(p.integer("warmup_num_steps", 0, big).value_or(1000)));
  lr_schedule::warmup_curve curve = lr_schedule::warmup_curve::log;
  if (auto w = p.one_of("warmup_type", {"log", "linear"})) curve = lr_schedule::parse_warmup_type(*w);
  auto total = [&] {
    auto v = p.integer("total_num_steps", 1, big);
    if (!v) p.fail("total_num_steps", cat("is missing (", *type, " needs it)"));
    return static_cast<long>(*v);
  };
  auto rate = [&](std::string_view k, double def) {
    return p.number(k, 0.0, std::numeric_limits<float>::max(), "a number >= 0").value_or(def);
  };
  auto ratio = [&](std::string_view k, double def) {
    return p.number(k, 0.0, 1.0, "a number in [0, 1]").value_or(def);
  };
  if (*type == "WarmupCosineLR") {
    const long t = total();
    const double min_ratio = ratio("warmup_min_ratio", 0.0), cos_ratio = ratio("cos_min_ratio", 1e-4);
    c.schedule = lr_schedule::warmup_cosine(c.lr, t, warmup, min_ratio, cos_ratio, curve);
    return;
  }
  const double lo = rate("warmup_min_lr", 0.0), hi = rate("warmup_max_lr", 1e-3);
  c.schedule = *type == "WarmupLR" ? lr_schedule::linear_warmup(lo, hi, warmup, curve)
                                   : lr_schedule::warmup_decay(lo, hi, warmup, total(), curve);
}

inline void read_strata(json_reader& root, run_config& c) {
  if (!root.has("strata")) return;
  json_reader s = child(root, "strata");
  constexpr long long big = std::numeric_limits<int>::max();
  if (auto v = s.integer("tensor_parallel_size", 1, big)) c.tensor_parallel_size = static_cast<int>(*v);
  if (auto v = s.integer("pipeline_parallel_size", 1, big)) c.pipeline_parallel_size = static_cast<int>(*v);
  if (auto v = s.one_of("pipeline_schedule", {"gpipe", "1f1b"})) c.pipeline_schedule = *v;
  if (auto v = s.integer("seed", 0, std::numeric_limits<long long>::max())) c.seed = static_cast<std::uint64_t>(*v);
  if (auto v = s.one_of("rounding", {"nearest_even", "stochastic"}))
    c.rounding = *v == "stochastic" ? rounding::stochastic : rounding::nearest_even;
}

}  // namespace detail

// Parses a config from JSON text; `source` begins every message (a file name, or
// "config"). Throws config_error naming the key path and what was expected. With
// `autos`, the "auto" values they resolve are filled first (io/config_auto.hpp); a value
// the file gives always wins over the program's.
inline run_config parse_config(std::string_view text, const std::string& source = "config",
                               const config_auto_values* autos = nullptr) {
  nlohmann::json root = detail::parse_json_once_each(text, source);
  if (!root.is_object())
    throw config_error(
        strata::cat(source, ": the top level must be a JSON object, got ", detail::json_reader::show(root)));
  run_config c;
  if (autos) {
    detail::fill_auto(root, *autos, source, c.auto_filled);
    std::sort(c.auto_filled.begin(), c.auto_filled.end());
  }
  {
    detail::json_reader r(root, source, "", &c.unknown_keys);
    detail::read_batch(r, c);
    detail::read_zero(r, c);
    detail::read_precision(r, c);
    detail::read_optimizer(r, c);
    detail::read_scheduler(r, c);
    detail::read_strata(r, c);
  }
  std::sort(c.unknown_keys.begin(), c.unknown_keys.end());
  return c;
}

// Reads and parses a config file; messages begin with its path.
inline run_config load_config(const std::filesystem::path& path, const config_auto_values* autos = nullptr) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw config_error(strata::cat(path.string(), ": cannot open the config file"));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw config_error(strata::cat(path.string(), ": cannot read the config file"));
  return parse_config(ss.str(), path.string(), autos);
}

// DeepSpeed's ZeRO-3 offload_param keeps parameter shards in host memory. On the host
// space that is where they are already: one line says so ("" without offload_param).
// A GPU trainer does offload them (trainer_options::offload_params).
inline std::string offload_param_note(const run_config& c) {
  if (!c.offload_param) return {};
  return "config: zero_optimization.offload_param.device \"cpu\": on the host, parameters already live in host "
         "memory (nothing more to offload)";
}

// One line listing the keys strata ignored, or "" when there are none.
inline std::string unknown_keys_warning(const run_config& c) {
  if (c.unknown_keys.empty()) return {};
  std::string s = strata::cat("config: ignoring ", c.unknown_keys.size(), c.unknown_keys.size() == 1 ? " key" : " keys",
                              " strata does not use: ");
  for (std::size_t i = 0; i < c.unknown_keys.size(); ++i) s += (i ? ", " : "") + c.unknown_keys[i];
  return s;
}

// One line naming the keys the file set that change nothing in strata, and why, or "" when
// there are none. A value the program filled in for "auto" is not named: nobody chose it.
inline std::string no_effect_keys_note(const run_config& c) {
  std::string s;
  for (const auto& [key, why] : c.no_effect_keys)
    if (std::find(c.auto_filled.begin(), c.auto_filled.end(), key) == c.auto_filled.end())
      s += strata::cat(s.empty() ? "config: read, but changing nothing in strata: " : "; ", key, " (", why, ")");
  return s;
}

namespace detail {

// A float as the shortest decimal that reads back as it: 3e-4f shows as 0.0003, not as
// the double it widens to (0.000300000014...).
inline double shortest(float f) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, f);
  double d = f;
  std::from_chars(buf, r.ptr, d);  // both locale-independent, unlike printf / strtod
  return d;
}

}  // namespace detail

// The config strata runs, in DeepSpeed's layout: every key it reads with the value it
// uses (defaults and filled "auto" included; the batch sizes as resolve() completed them
// once it has run). parse_config reads it back to the same settings.
inline nlohmann::json resolved_config_json(const run_config& c) {
  using detail::shortest;
  using nlohmann::json;
  json j = json::object();
  if (c.batch) {
    j["train_batch_size"] = c.batch->train_batch_size;
    j["train_micro_batch_size_per_gpu"] = c.batch->micro_batch_size;
    j["gradient_accumulation_steps"] = c.batch->gradient_accumulation_steps;
  } else {
    if (c.train_batch_size) j["train_batch_size"] = *c.train_batch_size;
    if (c.train_micro_batch_size_per_gpu) j["train_micro_batch_size_per_gpu"] = *c.train_micro_batch_size_per_gpu;
    if (c.gradient_accumulation_steps) j["gradient_accumulation_steps"] = *c.gradient_accumulation_steps;
  }
  j["gradient_clipping"] = shortest(c.gradient_clipping);
  j["steps_per_print"] = c.steps_per_print;

  json& z = j["zero_optimization"];
  z["stage"] = c.zero_stage;
  z["offload_optimizer"]["device"] = c.offload_optimizer ? "cpu" : "none";
  z["offload_param"]["device"] = c.offload_param ? "cpu" : "none";
  z["reduce_bucket_size"] = c.reduce_bucket_size;
  z["stage3_prefetch_bucket_size"] = c.stage3_prefetch_bucket_size;
  z["stage3_param_persistence_threshold"] = c.stage3_param_persistence_threshold;
  z["overlap_comm"] = c.overlap_comm;

  json& f = j["fp16"];
  const auto& ls = c.loss_scaler;
  f["enabled"] = c.fp16;
  f["loss_scale"] = shortest(ls.loss_scale);
  f["initial_scale_power"] = ls.initial_scale_power;
  f["loss_scale_window"] = ls.loss_scale_window;
  f["hysteresis"] = ls.hysteresis;
  f["consecutive_hysteresis"] = ls.consecutive_hysteresis;
  f["min_loss_scale"] = shortest(ls.min_loss_scale);
  j["bf16"]["enabled"] = c.bf16;

  json& o = j["optimizer"];
  json& op = o["params"];
  op["lr"] = shortest(c.lr);
  if (c.optimizer == "sgd") {
    o["type"] = "SGD";
    op["momentum"] = shortest(c.sgd_params.momentum);
    op["dampening"] = shortest(c.sgd_params.dampening);
    op["weight_decay"] = shortest(c.sgd_params.weight_decay);
    op["nesterov"] = c.sgd_params.nesterov;
  } else if (c.optimizer == "lion") {
    o["type"] = "Lion";
    op["betas"] = json::array({shortest(c.lion_params.beta1), shortest(c.lion_params.beta2)});
    op["weight_decay"] = shortest(c.lion_params.weight_decay);
  } else {
    const auto& a = c.adamw_params;
    o["type"] = "AdamW";
    op["betas"] = json::array({shortest(a.beta1), shortest(a.beta2)});
    op["eps"] = shortest(a.eps);
    op["weight_decay"] = shortest(a.weight_decay);
    op["bias_correction"] = a.bias_correction;
  }

  if (!c.scheduler.empty()) {
    const auto& sc = c.schedule;
    json& s = j["scheduler"];
    json& sp = s["params"];
    s["type"] = c.scheduler;
    sp["warmup_num_steps"] = sc.warmup_num_steps;
    sp["warmup_type"] = sc.warmup_type == lr_schedule::warmup_curve::linear ? "linear" : "log";
    if (c.scheduler == "WarmupCosineLR") {
      sp["warmup_min_ratio"] = sc.warmup_min_ratio;
      sp["cos_min_ratio"] = sc.cos_min_ratio;
    } else {
      sp["warmup_min_lr"] = sc.warmup_min_lr;
      sp["warmup_max_lr"] = sc.warmup_max_lr;
    }
    if (c.scheduler != "WarmupLR") sp["total_num_steps"] = sc.total_num_steps;
  }

  json& st = j["strata"];
  st["tensor_parallel_size"] = c.tensor_parallel_size;
  st["pipeline_parallel_size"] = c.pipeline_parallel_size;
  st["pipeline_schedule"] = c.pipeline_schedule;
  st["seed"] = c.seed;
  st["rounding"] = c.rounding == rounding::stochastic ? "stochastic" : "nearest_even";
  return j;
}

}  // namespace strata
