// Hugging Face's "auto" in a ds_config.json, filled from what the program knows, by the
// rules of transformers' HfTrainerDeepSpeedConfig (trainer_config_process and
// trainer_config_finalize), before io/config.hpp reads the file.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"

namespace strata {

// What the program knows (its command line and model), in the Trainer's terms. Fields
// with a default carry TrainingArguments' default; an optional left empty means the
// program does not know it, and an "auto" that needs it is a config_error naming the key.
struct config_auto_values {
  std::optional<double> lr;           // learning_rate: optimizer lr, scheduler warmup_max_lr
  double beta1 = 0.9, beta2 = 0.999;  // adam_beta1, adam_beta2: optimizer betas
  double eps = 1e-8;                  // adam_epsilon
  double weight_decay = 0.0;          // weight_decay
  long warmup_steps = 0;              // scheduler warmup_num_steps
  std::optional<long> total_steps;    // num_training_steps: scheduler total_num_steps
  // Batch sizes: give what the command line gives. A batch key left "auto" whose value
  // the program does not give is derived by run_config::resolve, as today; with the
  // micro batch and accumulation given, train_batch_size comes out as
  // micro * accumulation * data-parallel size, the Trainer's formula.
  std::optional<long> micro_batch_size;             // per rank: train_micro_batch_size_per_gpu
  std::optional<long> train_batch_size;             // global
  std::optional<long> gradient_accumulation_steps;  // gradient_accumulation_steps
  std::string precision = "fp32";                   // "fp32" | "bf16" | "fp16": fp16/bf16.enabled
  std::optional<long> hidden_size;                  // the model's: ZeRO bucket sizes
  double max_grad_norm = 1.0;                       // gradient_clipping
};

namespace detail {

// Fills the "auto" values of a config's JSON by dotted key path, recording each key filled.
class auto_filler {
 public:
  auto_filler(nlohmann::json& root, const std::string& source, std::vector<std::string>& filled)
      : root_(root), source_(source), filled_(filled) {}

  // The value at dotted `path`; nullptr when it or a section on the way is absent, or a
  // section is not an object (the reader reports that).
  nlohmann::json* find(std::string_view path) const {
    nlohmann::json* j = &root_;
    for (std::size_t b = 0;;) {
      const std::size_t e = path.find('.', b);
      if (!j->is_object()) return nullptr;
      auto it = j->find(std::string(path.substr(b, e == std::string_view::npos ? e : e - b)));
      if (it == j->end()) return nullptr;
      j = &*it;
      if (e == std::string_view::npos) break;
      b = e + 1;
    }
    return j;
  }
  // The value at `path` when it is "auto".
  nlohmann::json* slot(std::string_view path) const {
    nlohmann::json* j = find(path);
    return j && j->is_string() && j->get_ref<const std::string&>() == "auto" ? j : nullptr;
  }

  bool is_auto(std::string_view path) const { return slot(path) != nullptr; }

  template <class T>
  void fill(std::string_view path, const T& v) {
    if (auto* s = slot(path)) {
      *s = v;
      filled_.emplace_back(path);
    }
  }
  // An unknown value is an error where `what` names it, else the key stays "auto".
  template <class T>
  void fill(std::string_view path, const std::optional<T>& v, const char* what = nullptr) {
    if (!is_auto(path)) return;
    if (v) return fill(path, *v);
    if (what)
      fail(path, cat("is \"auto\", but the program gives no ", what, " to fill it in; write a value in the config"));
  }

  [[noreturn]] void fail(std::string_view path, const std::string& what) const {
    throw config_error(cat(source_, ": ", path, " ", what));
  }

 private:
  nlohmann::json& root_;
  const std::string& source_;
  std::vector<std::string>& filled_;
};

// Replaces the "auto" values of `root` that config_auto_values resolves; appends each key
// it filled to `filled`. Where the program cannot resolve one, throws a config_error that
// names the key and what to write instead. Other "auto" values stay for the reader (the
// batch sizes are derived, anything else is refused).
inline void fill_auto(nlohmann::json& root, const config_auto_values& v, const std::string& source,
                      std::vector<std::string>& filled) {
  if (v.precision != "fp32" && v.precision != "bf16" && v.precision != "fp16")
    throw config_error(cat(source,
                           ": the program's precision for \"auto\" must be \"fp32\", \"bf16\" or \"fp16\", got \"",
                           v.precision, "\""));
  // Where the file has no optimizer (or no scheduler), the Trainer makes its own from its
  // arguments: AdamW with --learning_rate, the betas, epsilon and --weight_decay, and its
  // warmup from --warmup_steps. Written here as "auto" entries, which the rules below fill
  // (and list in `filled`), so the program's options, not strata's defaults, decide.
  if (root.is_object() && !root.contains("optimizer") && v.lr)
    root["optimizer"] = {{"type", "AdamW"},
                         {"params", {{"lr", "auto"}, {"betas", "auto"}, {"eps", "auto"}, {"weight_decay", "auto"}}}};
  if (root.is_object() && !root.contains("scheduler") && v.lr && v.warmup_steps > 0) {
    // Up to the optimizer's lr (the file's where it writes one), over the program's warmup,
    // on DeepSpeed's default (log) curve, as the program warms up without a config.
    nlohmann::json peak = "auto";
    const auto* lr = auto_filler(root, source, filled).find("optimizer.params.lr");
    if (lr && lr->is_number()) peak = *lr;
    root["scheduler"] = {
        {"type", "WarmupLR"},
        {"params", {{"warmup_min_lr", "auto"}, {"warmup_max_lr", peak}, {"warmup_num_steps", "auto"}}}};
  }
  auto_filler f(root, source, filled);

  // trainer_config_process: the keys TrainingArguments decides.
  f.fill("train_micro_batch_size_per_gpu", v.micro_batch_size);
  f.fill("gradient_accumulation_steps", v.gradient_accumulation_steps);
  f.fill("train_batch_size", v.train_batch_size);
  f.fill("gradient_clipping", v.max_grad_norm);
  f.fill("optimizer.params.lr", v.lr, "learning rate");
  f.fill("optimizer.params.betas", nlohmann::json::array({v.beta1, v.beta2}));
  f.fill("optimizer.params.eps", v.eps);
  f.fill("optimizer.params.weight_decay", v.weight_decay);
  f.fill("scheduler.params.warmup_min_lr", 0.0);  // not a Trainer argument: always 0
  f.fill("scheduler.params.warmup_max_lr", v.lr, "learning rate");
  f.fill("fp16.enabled", v.precision == "fp16");
  f.fill("bf16.enabled", v.precision == "bf16");

  // trainer_config_finalize: the keys the model and the step count decide.
  static constexpr const char* hidden_keys[] = {"zero_optimization.reduce_bucket_size",
                                                "zero_optimization.stage3_prefetch_bucket_size",
                                                "zero_optimization.stage3_param_persistence_threshold"};
  for (const char* k : hidden_keys) {
    if (!f.is_auto(k) || v.hidden_size) continue;
    f.fail(k,
           "is \"auto\", which the Hugging Face Trainer derives from the model's hidden size, and the program "
           "gives none; write an integer (elements) in the config");
  }
  if (v.hidden_size) {
    const long long h = *v.hidden_size;
    long long h2 = 0;
    if (h < 1 || __builtin_mul_overflow(h, h, &h2))
      throw config_error(
          cat(source, ": the program's hidden size for \"auto\" must be >= 1 and its square fit, got ", h));
    f.fill(hidden_keys[0], h2);
    // The Trainer fills the stage-3 keys only at stage 3; elsewhere they stay unused.
    const nlohmann::json* stage = f.find("zero_optimization.stage");
    if (stage && stage->is_number_integer() && stage->get<long long>() == 3) {
      // int(0.9 * h * h), evaluated left to right in double as Python does.
      f.fill(hidden_keys[1], static_cast<long long>(0.9 * static_cast<double>(h) * static_cast<double>(h)));
      f.fill(hidden_keys[2], 10 * h);
    }
  }
  f.fill("scheduler.params.total_num_steps", v.total_steps, "total number of training steps");
  f.fill("scheduler.params.warmup_num_steps", v.warmup_steps);
}

}  // namespace detail
}  // namespace strata
