// DeepSpeed configs: every supported key lands in its field; batch sizes derive as
// DeepSpeed derives them; Hugging Face's "auto" is filled from the program's values as the
// Trainer fills it; resolved_config_json reads back to the same settings; each malformed
// config in tests/data/configs/bad_*.json fails with its exact message.
// (tests/unit/train/from_config.cpp: the mapping onto the trainer.)
#include "strata/io/config.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <typeinfo>
#include <utility>
#include <vector>

#include "support.hpp"

using io_test::error_of;
using strata::config_auto_values;
using strata::config_error;
using strata::parse_config;
using strata::run_config;

namespace {

const std::filesystem::path configs = std::filesystem::path(STRATA_TEST_DATA_DIR) / "configs";

std::string config_error_of(const std::string& text) {
  return error_of<config_error>([&] { parse_config(text); });
}

// The same schedule: every field that matters, and the rate over a range of steps.
void check_same_schedule(const strata::lr_schedule& a, const strata::lr_schedule& b) {
  CHECK(a.type == b.type);
  CHECK(a.warmup_type == b.warmup_type);
  CHECK(a.warmup_num_steps == b.warmup_num_steps);
  CHECK(a.total_num_steps == b.total_num_steps);
  for (long k : {0L, 1L, 7L, 50L, 99L, 100L, 101L, 500L, 999L, 1000L, 5000L}) CHECK(a.lr(k) == b.lr(k));
}

// What a program knows, as the Hugging Face Trainer would have it: its command line (lr,
// weight decay, warmup, steps, micro batch and accumulation, precision) and the model's
// hidden size (Qwen2.5-0.5B's); betas, eps and max_grad_norm keep the Trainer's defaults.
config_auto_values program_values() {
  config_auto_values v;
  v.lr = 3e-4;
  v.weight_decay = 0.01;
  v.warmup_steps = 100;
  v.total_steps = 1000;
  v.micro_batch_size = 4;
  v.gradient_accumulation_steps = 2;
  v.precision = "bf16";
  v.hidden_size = 896;
  return v;
}

std::string auto_error_of(const std::string& text, const config_auto_values& v) {
  return error_of<config_error>([&] { parse_config(text, "config", &v); });
}

// The same settings, field by field (the batch sizes as resolved).
void check_same_settings(const run_config& a, const run_config& b) {
  REQUIRE(a.batch);
  REQUIRE(b.batch);
  CHECK(a.batch->train_batch_size == b.batch->train_batch_size);
  CHECK(a.batch->micro_batch_size == b.batch->micro_batch_size);
  CHECK(a.batch->gradient_accumulation_steps == b.batch->gradient_accumulation_steps);
  CHECK(a.zero_stage == b.zero_stage);
  CHECK(a.offload_optimizer == b.offload_optimizer);
  CHECK(a.offload_param == b.offload_param);
  CHECK(a.reduce_bucket_size == b.reduce_bucket_size);
  CHECK(a.stage3_prefetch_bucket_size == b.stage3_prefetch_bucket_size);
  CHECK(a.stage3_param_persistence_threshold == b.stage3_param_persistence_threshold);
  CHECK(a.overlap_comm == b.overlap_comm);
  CHECK(a.precision() == b.precision());
  CHECK(a.loss_scaler.loss_scale == b.loss_scaler.loss_scale);
  CHECK(a.loss_scaler.initial_scale_power == b.loss_scaler.initial_scale_power);
  CHECK(a.loss_scaler.loss_scale_window == b.loss_scaler.loss_scale_window);
  CHECK(a.loss_scaler.hysteresis == b.loss_scaler.hysteresis);
  CHECK(a.loss_scaler.consecutive_hysteresis == b.loss_scaler.consecutive_hysteresis);
  CHECK(a.loss_scaler.min_loss_scale == b.loss_scaler.min_loss_scale);
  CHECK(a.gradient_clipping == b.gradient_clipping);
  CHECK(a.optimizer == b.optimizer);
  CHECK(a.lr == b.lr);
  CHECK(a.adamw_params.beta1 == b.adamw_params.beta1);
  CHECK(a.adamw_params.beta2 == b.adamw_params.beta2);
  CHECK(a.adamw_params.eps == b.adamw_params.eps);
  CHECK(a.adamw_params.weight_decay == b.adamw_params.weight_decay);
  CHECK(a.adamw_params.bias_correction == b.adamw_params.bias_correction);
  CHECK(a.sgd_params.momentum == b.sgd_params.momentum);
  CHECK(a.sgd_params.dampening == b.sgd_params.dampening);
  CHECK(a.sgd_params.weight_decay == b.sgd_params.weight_decay);
  CHECK(a.sgd_params.nesterov == b.sgd_params.nesterov);
  CHECK(a.lion_params.beta1 == b.lion_params.beta1);
  CHECK(a.lion_params.beta2 == b.lion_params.beta2);
  CHECK(a.lion_params.weight_decay == b.lion_params.weight_decay);
  CHECK(a.scheduler == b.scheduler);
  CHECK(a.schedule.base_lr == b.schedule.base_lr);
  CHECK(a.schedule.warmup_min_lr == b.schedule.warmup_min_lr);
  CHECK(a.schedule.warmup_max_lr == b.schedule.warmup_max_lr);
  CHECK(a.schedule.warmup_min_ratio == b.schedule.warmup_min_ratio);
  CHECK(a.schedule.cos_min_ratio == b.schedule.cos_min_ratio);
  check_same_schedule(a.schedule, b.schedule);
  CHECK(a.steps_per_print == b.steps_per_print);
  CHECK(a.tensor_parallel_size == b.tensor_parallel_size);
  CHECK(a.pipeline_parallel_size == b.pipeline_parallel_size);
  CHECK(a.pipeline_schedule == b.pipeline_schedule);
  CHECK(a.seed == b.seed);
  CHECK(a.rounding == b.rounding);
}

}  // namespace

TEST_CASE("a full config: every key lands in its field") {
  run_config c = strata::load_config(configs / "full.json");
  CHECK(c.train_batch_size == 64);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 4);
  CHECK(c.gradient_clipping == 1.5f);
  CHECK(c.steps_per_print == 25);

  CHECK(c.zero_stage == 3);
  CHECK(c.offload_optimizer);
  CHECK(c.reduce_bucket_size == 50'000'000);  // written 5e7: integral floats are accepted
  CHECK(c.stage3_prefetch_bucket_size == 20'000'000);
  CHECK(c.stage3_param_persistence_threshold == 10'000);
  CHECK_FALSE(c.overlap_comm);  // given, so the stage-3 default (true) does not apply

  CHECK(c.fp16);
  CHECK_FALSE(c.bf16);
  CHECK(c.precision() == "fp16");
  CHECK(c.loss_scaler.loss_scale == 0.0f);
  CHECK(c.loss_scaler.initial_scale_power == 12);
  CHECK(c.loss_scaler.loss_scale_window == 500);
  CHECK(c.loss_scaler.hysteresis == 3);
  CHECK(c.loss_scaler.consecutive_hysteresis);
  CHECK(c.loss_scaler.min_loss_scale == 0.5f);

  CHECK(c.optimizer == "adamw");
  CHECK(c.lr == 3e-4f);
  CHECK(c.adamw_params.beta1 == 0.8f);
  CHECK(c.adamw_params.beta2 == 0.95f);
  CHECK(c.adamw_params.eps == 1e-6f);
  CHECK(c.adamw_params.weight_decay == 0.1f);
  CHECK_FALSE(c.adamw_params.bias_correction);

  CHECK(c.scheduler == "WarmupDecayLR");
  CHECK(c.schedule.warmup_min_lr == 1e-5);
  CHECK(c.schedule.warmup_max_lr == 3e-4);
  check_same_schedule(
      c.schedule, strata::lr_schedule::warmup_decay(1e-5, 3e-4, 100, 1000, strata::lr_schedule::warmup_curve::linear));

  CHECK(c.tensor_parallel_size == 2);
  CHECK(c.pipeline_parallel_size == 2);
  CHECK(c.pipeline_schedule == "gpipe");
  CHECK(c.seed == 1234);
  CHECK(c.rounding == strata::rounding::stochastic);

  CHECK(c.unknown_keys == std::vector<std::string>{"wall_clock_breakdown", "zero_optimization.contiguous_gradients",
                                                   "zero_optimization.offload_optimizer.pin_memory"});
  CHECK(strata::unknown_keys_warning(c) ==
        "config: ignoring 3 keys strata does not use: wall_clock_breakdown, zero_optimization.contiguous_gradients, "
        "zero_optimization.offload_optimizer.pin_memory");
}

TEST_CASE("defaults: DeepSpeed's where it has them") {
  run_config c = parse_config(R"({"train_batch_size": 8})");
  CHECK(c.zero_stage == 0);
  CHECK_FALSE(c.offload_optimizer);
  CHECK_FALSE(c.offload_param);
  CHECK(c.reduce_bucket_size == strata::default_bucket_elems);
  CHECK(c.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(c.stage3_param_persistence_threshold == 100'000);
  CHECK_FALSE(c.overlap_comm);
  CHECK(c.precision() == "fp32");
  CHECK(c.loss_scaler.initial_scale_power == 16);
  CHECK(c.gradient_clipping == 0.0f);
  CHECK(c.optimizer == "adamw");
  CHECK(c.lr == 1e-3f);
  CHECK(c.adamw_params.weight_decay == 0.0f);  // DeepSpeed's FusedAdam default, not torch's 0.01
  CHECK(c.scheduler.empty());
  CHECK(c.schedule.type == strata::lr_schedule::kind::constant);
  CHECK(c.schedule.lr(123) == 1e-3f);
  CHECK(c.steps_per_print == 10);
  CHECK(c.tensor_parallel_size == 1);
  CHECK(c.pipeline_parallel_size == 1);
  CHECK(c.pipeline_schedule == "1f1b");
  CHECK(c.seed == 0);
  CHECK(c.rounding == strata::rounding::nearest_even);
  CHECK(c.unknown_keys.empty());
  CHECK(strata::unknown_keys_warning(c).empty());
  // overlap_comm defaults to true at stage 3, as in DeepSpeed.
  CHECK(parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})").overlap_comm);
  // null reads as absent, as DeepSpeed's Python does.
  CHECK(parse_config(R"({"train_batch_size": 8, "gradient_clipping": null})").gradient_clipping == 0.0f);
}

TEST_CASE("DeepSpeed keys that change nothing in strata are named when the file sets them") {
  const run_config none = parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})");
  CHECK(none.no_effect_keys.empty());
  CHECK(strata::no_effect_keys_note(none).empty());
  const run_config c = parse_config(
      R"({"train_batch_size": 8, "steps_per_print": 50, "zero_optimization": {"stage": 3, "overlap_comm": false,
          "stage3_prefetch_bucket_size": 1000, "stage3_param_persistence_threshold": 10}})");
  CHECK(strata::no_effect_keys_note(c) ==
        "config: read, but changing nothing in strata: steps_per_print (strata logs nothing itself; the trainer "
        "returns each step's stats); zero_optimization.stage3_prefetch_bucket_size (ZeRO-3 gathers the next "
        "reduce_bucket_size bucket ahead); zero_optimization.stage3_param_persistence_threshold (every param is "
        "sharded at ZeRO-3, however small); zero_optimization.overlap_comm (each gradient bucket's reduce-scatter "
        "always overlaps the backward)");
  // Values the program filled for "auto" were nobody's choice: not named.
  config_auto_values v = program_values();
  const run_config filled = strata::load_config(configs / "hf_zero3_auto.json", &v);
  CHECK(filled.stage3_prefetch_bucket_size == 722'534);
  CHECK(strata::no_effect_keys_note(filled).find("stage3_prefetch_bucket_size") == std::string::npos);
  CHECK(strata::no_effect_keys_note(filled).find("stage3_param_persistence_threshold") == std::string::npos);
}

TEST_CASE("ZeRO-3 offload_param to the CPU: accepted, with one line for the host space") {
  const run_config c =
      parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})");
  CHECK(c.offload_param);
  CHECK(strata::offload_param_note(c) ==
        "config: zero_optimization.offload_param.device \"cpu\": on the host, parameters already live in host memory "
        "(nothing more to offload)");
  const run_config none = parse_config(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "none"}}})");
  CHECK_FALSE(none.offload_param);
  CHECK(strata::offload_param_note(none).empty());
}

TEST_CASE("\"auto\" without the program's values: batch sizes derived, bucket sizes defaulted, the rest refused") {
  run_config c = strata::load_config(configs / "hf_auto.json");
  CHECK_FALSE(c.train_batch_size);
  CHECK_FALSE(c.gradient_accumulation_steps);
  const auto& b = c.resolve(2);
  CHECK(b.train_batch_size == 16);
  CHECK(b.micro_batch_size == 8);
  CHECK(b.gradient_accumulation_steps == 1);
  CHECK(c.zero_stage == 2);
  CHECK_FALSE(c.offload_optimizer);
  CHECK(c.reduce_bucket_size == strata::default_bucket_elems);
  CHECK(c.overlap_comm);
  CHECK(c.precision() == "bf16");
  CHECK(c.optimizer == "adamw");  // DeepSpeed's "Adam" is AdamW-mode FusedAdam
  CHECK(c.lr == 2e-5f);
  CHECK(strata::unknown_keys_warning(c) == "config: ignoring 1 key strata does not use: zero_allow_untested_optimizer");
  CHECK(config_error_of(R"({"train_batch_size": 8, "fp16": {"enabled": "auto"}})") ==
        "config: fp16.enabled is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; strata "
        "needs a value here");
  CHECK(config_error_of(R"({"train_batch_size": 8, "gradient_clipping": "auto"})")
            .rfind("config: gradient_clipping is \"auto\"", 0) == 0);
}

TEST_CASE("Hugging Face's ZeRO-2 template: each \"auto\" filled from the program's values as the Trainer does") {
  const config_auto_values v = program_values();
  run_config c = strata::load_config(configs / "hf_zero2_auto.json", &v);
  CHECK(c.auto_filled == std::vector<std::string>{"bf16.enabled", "fp16.enabled", "gradient_accumulation_steps",
                                                  "gradient_clipping", "optimizer.params.betas", "optimizer.params.eps",
                                                  "optimizer.params.lr", "optimizer.params.weight_decay",
                                                  "scheduler.params.warmup_max_lr", "scheduler.params.warmup_min_lr",
                                                  "scheduler.params.warmup_num_steps", "train_micro_batch_size_per_gpu",
                                                  "zero_optimization.reduce_bucket_size"});
  // train_batch_size: the program gives no global batch, so resolve() derives it as the
  // Trainer computes it, micro batch * accumulation * data-parallel size.
  CHECK_FALSE(c.train_batch_size);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 2);
  const auto& b = c.resolve(4);
  CHECK(b.train_batch_size == 32);
  CHECK(b.micro_batch_size == 4);
  CHECK(b.gradient_accumulation_steps == 2);

  CHECK(c.gradient_clipping == 1.0f);  // max_grad_norm, the Trainer's default
  CHECK(c.optimizer == "adamw");
  CHECK(c.lr == 3e-4f);
  CHECK(c.adamw_params.beta1 == 0.9f);
  CHECK(c.adamw_params.beta2 == 0.999f);
  CHECK(c.adamw_params.eps == 1e-8f);
  CHECK(c.adamw_params.weight_decay == 0.01f);
  CHECK(c.scheduler == "WarmupLR");
  CHECK(c.schedule.warmup_min_lr == 0.0);
  CHECK(c.schedule.warmup_max_lr == 3e-4);
  check_same_schedule(c.schedule, strata::lr_schedule::linear_warmup(0.0, 3e-4, 100));
  CHECK(c.precision() == "bf16");
  CHECK_FALSE(c.fp16);
  CHECK(c.loss_scaler.loss_scale_window == 1000);

  CHECK(c.zero_stage == 2);
  CHECK(c.offload_optimizer);
  CHECK(c.overlap_comm);
  CHECK(c.reduce_bucket_size == 896 * 896);
  // Stage-3 keys absent: their defaults.
  CHECK(c.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(c.stage3_param_persistence_threshold == 100'000);
  CHECK(c.steps_per_print == 2000);
  CHECK(c.unknown_keys ==
        std::vector<std::string>{"wall_clock_breakdown", "zero_optimization.allgather_bucket_size",
                                 "zero_optimization.allgather_partitions", "zero_optimization.contiguous_gradients",
                                 "zero_optimization.offload_optimizer.pin_memory", "zero_optimization.reduce_scatter"});

  // Without the program's values the template stops at the first key only it can fill.
  const auto path = configs / "hf_zero2_auto.json";
  CHECK(error_of<config_error>([&] { strata::load_config(path); }) ==
        path.string() +
            ": gradient_clipping is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; "
            "strata needs a value here");
}

// The file is the Hugging Face docs' ZeRO-3 template with WarmupDecayLR, except
// offload_param: "none" where the docs say "cpu" (strata offloads the optimizer state,
// not parameters).
TEST_CASE("Hugging Face's ZeRO-3 template: bucket sizes from the hidden size, a global batch from the program") {
  config_auto_values v = program_values();
  v.precision = "fp16";
  v.micro_batch_size.reset();  // a program that takes the global batch (--batch 64) instead
  v.train_batch_size = 64;
  v.max_grad_norm = 0.5;
  run_config c = strata::load_config(configs / "hf_zero3_auto.json", &v);
  CHECK(c.train_batch_size == 64);
  CHECK_FALSE(c.train_micro_batch_size_per_gpu);
  const auto& b = c.resolve(4);
  CHECK(b.micro_batch_size == 8);  // derived: 64 / (2 * 4)
  CHECK(b.gradient_accumulation_steps == 2);

  CHECK(c.zero_stage == 3);
  CHECK(c.offload_optimizer);
  CHECK(c.reduce_bucket_size == 802'816);                // hidden^2
  CHECK(c.stage3_prefetch_bucket_size == 722'534);       // int(0.9 * hidden^2)
  CHECK(c.stage3_param_persistence_threshold == 8'960);  // 10 * hidden
  CHECK(c.precision() == "fp16");
  CHECK(c.loss_scaler.loss_scale == 0.0f);
  CHECK(c.loss_scaler.initial_scale_power == 16);
  CHECK(c.loss_scaler.hysteresis == 2);
  CHECK(c.loss_scaler.min_loss_scale == 1.0f);
  CHECK(c.gradient_clipping == 0.5f);
  CHECK(c.lr == 3e-4f);
  CHECK(c.scheduler == "WarmupDecayLR");
  check_same_schedule(c.schedule, strata::lr_schedule::warmup_decay(0.0, 3e-4, 100, 1000));
  CHECK(std::find(c.auto_filled.begin(), c.auto_filled.end(), "scheduler.params.total_num_steps") !=
        c.auto_filled.end());
  CHECK(std::find(c.auto_filled.begin(), c.auto_filled.end(), "train_micro_batch_size_per_gpu") ==
        c.auto_filled.end());  // left to resolve()
}

TEST_CASE("\"auto\" filled: a value the file gives wins over the program's") {
  const config_auto_values v = program_values();
  const run_config c = parse_config(R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.25,
      "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.8, 0.95], "weight_decay": "auto"}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-4, "warmup_num_steps": "auto"}},
      "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000, "stage3_prefetch_bucket_size": "auto"},
      "bf16": {"enabled": false}})",
                                    "config", &v);
  CHECK(c.auto_filled == std::vector<std::string>{"optimizer.params.weight_decay", "scheduler.params.warmup_num_steps",
                                                  "zero_optimization.stage3_prefetch_bucket_size"});
  CHECK(c.train_micro_batch_size_per_gpu == 2);
  CHECK_FALSE(c.gradient_accumulation_steps);  // absent is not "auto": the program's value is not used...
  CHECK(c.gradient_clipping == 0.25f);
  CHECK(c.lr == 1e-4f);
  CHECK(c.adamw_params.beta1 == 0.8f);
  CHECK(c.adamw_params.eps == 1e-8f);  // ... and an absent key keeps strata's default
  CHECK(c.adamw_params.weight_decay == 0.01f);
  check_same_schedule(c.schedule, strata::lr_schedule::linear_warmup(0.0, 1e-4, 100));
  CHECK(c.reduce_bucket_size == 1000);
  CHECK(c.stage3_prefetch_bucket_size == 722'534);
  CHECK(c.stage3_param_persistence_threshold == 100'000);
  CHECK(c.precision() == "fp32");

  // Below stage 3 the Trainer leaves the stage-3 keys alone: strata's defaults.
  const run_config z2 = parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto"}})",
                                     "config", &v);
  CHECK(z2.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(z2.stage3_param_persistence_threshold == 100'000);
  for (const auto& k : z2.auto_filled) CHECK(k.rfind("zero_optimization", 0) != 0);

  // The Trainer's default warmup (0 steps) is DeepSpeed's max(2, N) warmup as N = 1.
  config_auto_values none_warm = v;
  none_warm.warmup_steps = 0;
  const run_config w = parse_config(
      R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}}})", "config",
      &none_warm);
  check_same_schedule(w.schedule, strata::lr_schedule::linear_warmup(0.0, 1e-3, 1));
  for (long k : {0L, 1L, 2L, 3L}) CHECK(w.schedule.lr(k) == strata::lr_schedule::linear_warmup(0.0, 1e-3, 2).lr(k));
}

TEST_CASE("an \"auto\" the program cannot fill: an error naming the key and what to write") {
  const config_auto_values nothing;  // a program that passes on no lr, steps, batch or model
  CHECK(auto_error_of(io_test::read_bytes(configs / "bad_lr_auto.json"), nothing) ==
        "config: optimizer.params.lr is \"auto\", but the program gives no learning rate to fill it in; write a "
        "value in the config");
  CHECK(auto_error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
      "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": "auto"}}})",
                      nothing) ==
        "config: scheduler.params.warmup_max_lr is \"auto\", but the program gives no learning rate to fill it in; "
        "write a value in the config");
  CHECK(auto_error_of(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupDecayLR",
      "params": {"total_num_steps": "auto"}}})",
                      nothing) ==
        "config: scheduler.params.total_num_steps is \"auto\", but the program gives no total number of training "
        "steps to fill it in; write a value in the config");
  CHECK(auto_error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}})",
                      nothing) ==
        "config: zero_optimization.reduce_bucket_size is \"auto\", which the Hugging Face Trainer derives from the "
        "model's hidden size, and the program gives none; write an integer (elements) in the config");
  // As in the Trainer, at any stage.
  CHECK(
      auto_error_of(R"({"train_batch_size": 8, "zero_optimization": {"stage3_prefetch_bucket_size": "auto"}})", nothing)
          .rfind("config: zero_optimization.stage3_prefetch_bucket_size is \"auto\", which", 0) == 0);
  const auto path = configs / "hf_zero3_auto.json";
  config_auto_values no_model = program_values();
  no_model.hidden_size.reset();
  CHECK(error_of<config_error>([&] {
          strata::load_config(path, &no_model);
        }).rfind(path.string() + ": zero_optimization.reduce_bucket_size is \"auto\"", 0) == 0);

  // Keys the Trainer does not fill stay refused.
  CHECK(auto_error_of(R"({"train_batch_size": 8, "fp16": {"enabled": true, "loss_scale": "auto"}})", nothing) ==
        "config: fp16.loss_scale is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; "
        "strata needs a value here");
  // Batch sizes nobody gives.
  CHECK(error_of<config_error>([&] {
          parse_config(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"})", "config", &nothing)
              .resolve(2);
        }) == "config: train_batch_size or train_micro_batch_size_per_gpu must be given");
  // A filled value is checked as a written one.
  config_auto_values neg = program_values();
  neg.lr = -1.0;
  CHECK(auto_error_of(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})", neg) ==
        "config: optimizer.params.lr must be a number >= 0, got -1.0");

  config_auto_values bad = program_values();
  bad.precision = "fp8";
  CHECK(auto_error_of(R"({"train_batch_size": 8})", bad) ==
        "config: the program's precision for \"auto\" must be \"fp32\", \"bf16\" or \"fp16\", got \"fp8\"");
  bad = program_values();
  bad.hidden_size = 0;
  CHECK(auto_error_of(R"({"train_batch_size": 8})", bad) ==
        "config: the program's hidden size for \"auto\" must be >= 1 and its square fit, got 0");
}

TEST_CASE("no optimizer or scheduler section: the program's AdamW and warmup, as the Trainer builds its own") {
  config_auto_values v = program_values();
  v.lr = 2e-4;
  v.weight_decay = 0.05;
  v.warmup_steps = 7;
  const run_config c = parse_config(R"({"train_batch_size": 8})", "config", &v);
  CHECK(c.optimizer == "adamw");
  CHECK(c.lr == 2e-4f);
  CHECK(c.adamw_params.weight_decay == 0.05f);
  CHECK(c.adamw_params.beta1 == static_cast<float>(v.beta1));
  CHECK(c.adamw_params.eps == static_cast<float>(v.eps));
  CHECK(c.scheduler == "WarmupLR");
  check_same_schedule(c.schedule, strata::lr_schedule::linear_warmup(0.0, 2e-4, 7));
  for (const char* k : {"optimizer.params.lr", "optimizer.params.weight_decay", "scheduler.params.warmup_num_steps"})
    CHECK(std::find(c.auto_filled.begin(), c.auto_filled.end(), k) != c.auto_filled.end());
  // Without a warmup the lr stays constant: no scheduler.
  v.warmup_steps = 0;
  CHECK(parse_config(R"({"train_batch_size": 8})", "config", &v).scheduler.empty());
  // A section the file gives is the file's.
  const run_config own =
      parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})", "config", &v);
  CHECK(own.lr == 1e-3f);
  CHECK(own.adamw_params.weight_decay == 0.0f);  // DeepSpeed's default, not the program's
  // Warming up to the file's lr where the file gives the optimizer and not the scheduler.
  v.warmup_steps = 7;
  const run_config warm =
      parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}})", "config", &v);
  check_same_schedule(warm.schedule, strata::lr_schedule::linear_warmup(0.0, 1e-3, 7));
  // Without the program's values (or its lr), strata's defaults as before.
  CHECK(parse_config(R"({"train_batch_size": 8})").lr == 1e-3f);
  config_auto_values no_lr = program_values();
  no_lr.lr.reset();
  CHECK(parse_config(R"({"train_batch_size": 8})", "config", &no_lr).lr == 1e-3f);
}

TEST_CASE("resolved_config_json: the settings strata uses, in DeepSpeed's layout, read back to the same") {
  const config_auto_values v = program_values();
  std::vector<std::pair<run_config, int>> cases;
  cases.emplace_back(strata::load_config(configs / "full.json"), 4);
  cases.emplace_back(strata::load_config(configs / "hf_zero2_auto.json", &v), 4);
  cases.emplace_back(strata::load_config(configs / "hf_zero3_auto.json", &v), 2);
  cases.emplace_back(parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "sgd", "params":
      {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4, "nesterov": true}}})"),
                     1);
  cases.emplace_back(parse_config(R"({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Lion", "params":
      {"lr": 1e-4, "betas": [0.95, 0.98]}}, "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 500,
      "warmup_num_steps": 20, "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01}}, "strata": {"seed": 7}})"),
                     3);
  for (auto& [c, dp] : cases) {
    c.resolve(dp);
    const auto j = strata::resolved_config_json(c);
    INFO(j.dump());
    run_config back = parse_config(j.dump());
    CHECK(back.unknown_keys.empty());
    back.resolve(dp);
    check_same_settings(c, back);
  }
  // Floats as the decimals they were written as; the batch sizes as resolved.
  const auto j = strata::resolved_config_json(cases[1].first);
  CHECK(j["optimizer"]["params"]["lr"].dump() == "0.0003");
  CHECK(j["optimizer"]["params"]["weight_decay"].dump() == "0.01");
  CHECK(j["train_batch_size"] == 32);
  CHECK(j["zero_optimization"]["reduce_bucket_size"] == 802'816);
  CHECK(j["bf16"]["enabled"] == true);
  CHECK(j["scheduler"]["params"]["warmup_max_lr"].dump() == "0.0003");
}

TEST_CASE("SGD, Lion, case-insensitive optimizer types, and the old bfloat16 section") {
  run_config s = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "sgd", "params":
      {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 1e-4, "nesterov": true}}})");
  CHECK(s.optimizer == "sgd");
  CHECK(s.lr == 0.1f);
  CHECK(s.sgd_params.momentum == 0.9f);
  CHECK(s.sgd_params.dampening == 0.0f);
  CHECK(s.sgd_params.weight_decay == 1e-4f);
  CHECK(s.sgd_params.nesterov);

  run_config l = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "LION", "params":
      {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.5}}})");
  CHECK(l.optimizer == "lion");
  CHECK(l.lr == 1e-4f);
  CHECK(l.lion_params.beta1 == 0.95f);
  CHECK(l.lion_params.beta2 == 0.98f);
  CHECK(l.lion_params.weight_decay == 0.5f);
  // Keys that belong to another optimizer are reported, not silently applied.
  CHECK(parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "Lion", "params": {"momentum": 0.9}}})")
            .unknown_keys == std::vector<std::string>{"optimizer.params.momentum"});

  CHECK(parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "aDaMw"}})").optimizer == "adamw");
  // Adam without decoupled mode is the same update when there is no weight decay.
  CHECK(parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})")
            .optimizer == "adamw");

  CHECK(parse_config(R"({"train_batch_size": 8, "bfloat16": {"enabled": true}})").precision() == "bf16");
  const run_config both =
      parse_config(R"({"train_batch_size": 8, "bf16": {"enabled": false}, "bfloat16": {"enabled": true}})");
  CHECK(both.precision() == "fp32");  // "bf16" wins, as in DeepSpeed
  CHECK(both.unknown_keys == std::vector<std::string>{"bfloat16"});
}

TEST_CASE("WarmupLR and WarmupCosineLR map onto the same lr_schedule") {
  const run_config w = parse_config(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params":
      {"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 50}}})");
  CHECK(w.scheduler == "WarmupLR");
  check_same_schedule(w.schedule, strata::lr_schedule::linear_warmup(0.0, 0.01, 50));
  CHECK(w.schedule.warmup_type == strata::lr_schedule::warmup_curve::log);  // DeepSpeed's default

  const run_config c = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW", "params": {"lr": 0.002}},
      "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 500, "warmup_num_steps": 20,
      "warmup_min_ratio": 0.1, "cos_min_ratio": 0.01, "warmup_type": "linear"}}})");
  CHECK(c.schedule.base_lr == static_cast<double>(0.002f));  // the optimizer's lr, as DeepSpeed's WarmupCosineLR
  CHECK(c.schedule.warmup_min_ratio == 0.1);
  CHECK(c.schedule.cos_min_ratio == 0.01);
  check_same_schedule(c.schedule, strata::lr_schedule::warmup_cosine(0.002f, 500, 20, 0.1, 0.01,
                                                                     strata::lr_schedule::warmup_curve::linear));
}

TEST_CASE("batch sizes: the missing one derived as DeepSpeed does, inconsistency named with the numbers") {
  auto resolve = [](const std::string& json, int dp) {
    run_config c = parse_config(json);
    const auto b = c.resolve(dp);
    return std::vector<long>{b.train_batch_size, b.micro_batch_size, b.gradient_accumulation_steps};
  };
  auto resolve_error = [](const std::string& json, int dp) {
    return error_of<config_error>([&] { parse_config(json).resolve(dp); });
  };
  using v = std::vector<long>;
  CHECK(resolve(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})",
                4) == v{64, 4, 4});
  CHECK(resolve(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 4) == v{64, 4, 4});
  CHECK(resolve(R"({"train_batch_size": 64, "gradient_accumulation_steps": 2})", 4) == v{64, 8, 2});
  CHECK(resolve(R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 3) == v{24, 4, 2});
  CHECK(resolve(R"({"train_batch_size": 32})", 4) == v{32, 8, 1});
  CHECK(resolve(R"({"train_micro_batch_size_per_gpu": 4})", 2) == v{8, 4, 1});

  CHECK(
      resolve_error(
          R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})", 2) ==
      "config: train_batch_size (64) must equal train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps (4) * "
      "data-parallel size (2) = 32");
  CHECK(resolve_error(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})", 3) ==
        "config: train_batch_size (64) must equal train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps "
        "(derived: 5) * data-parallel size (3) = 60");
  CHECK(resolve_error(R"({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 4})", 1) ==
        "config: train_batch_size (2) must equal train_micro_batch_size_per_gpu (4) * gradient_accumulation_steps "
        "(derived: 0) * data-parallel size (1) = 0");
  CHECK(resolve_error(R"({"train_batch_size": 30, "gradient_accumulation_steps": 4})", 4) ==
        "config: train_batch_size (30) must equal train_micro_batch_size_per_gpu (derived: 1) * "
        "gradient_accumulation_steps (4) * data-parallel size (4) = 16");
  CHECK(resolve_error(R"({"gradient_accumulation_steps": 4})", 1) ==
        "config: train_batch_size or train_micro_batch_size_per_gpu must be given");
  CHECK(resolve_error(R"({"train_batch_size": 8})", 0) == "config: the data-parallel size must be >= 1, got 0");

  // resolve() starts from the values as given, so it can run again for another layout.
  run_config c = parse_config(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})");
  CHECK(c.resolve(4).gradient_accumulation_steps == 4);
  CHECK(c.resolve(2).gradient_accumulation_steps == 8);
  CHECK(c.batch->gradient_accumulation_steps == 8);
}

TEST_CASE("malformed configs: each fails with its exact message") {
  const std::map<std::string, std::string> expected{
      {"bad_adam_l2.json",
       "config: optimizer.params.adam_w_mode is false with weight_decay > 0 (Adam with L2 decay): strata implements "
       "decoupled decay only; use AdamW, or weight_decay 0"},
      {"bad_amsgrad.json", "config: optimizer.params.amsgrad is true: strata's Adam has no AMSGrad variant"},
      {"bad_batch_fraction.json", "config: train_batch_size must be an integer >= 1, got 8.5"},
      {"bad_batch_large.json", "config: train_batch_size must be an integer <= 2147483647, got 3000000000.0"},
      {"bad_batch_zero.json", "config: train_micro_batch_size_per_gpu must be an integer >= 1, got 0"},
      {"bad_beta_range.json",
       "config: optimizer.params.betas must be [beta1, beta2] with each in [0, 1), got [0.9,1.0]"},
      {"bad_betas.json", "config: optimizer.params.betas must be [beta1, beta2] with each in [0, 1), got [0.9]"},
      {"bad_bucket_size.json", "config: zero_optimization.reduce_bucket_size must be an integer >= 1, got 1000.5"},
      {"bad_clipping.json", "config: gradient_clipping must be a number >= 0, got -1.0"},
      {"bad_cos_ratio.json", "config: scheduler.params.cos_min_ratio must be a number in [0, 1], got 2"},
      {"bad_duplicate_key.json",
       "config: zero_optimization is given twice; give each key once (a JSON parser would keep the last silently)"},
      {"bad_duplicate_nested_key.json",
       "config: optimizer.params.lr is given twice; give each key once (a JSON parser would keep the last "
       "silently)"},
      {"bad_fp16_and_bf16.json", "config: fp16.enabled and bf16.enabled are both true; enable one of them"},
      {"bad_fp16_enabled_type.json", "config: fp16.enabled must be true or false, got \"yes\""},
      {"bad_fp16_min_scale.json",
       "config: fp16.min_loss_scale must be a number > 0 (a 32-bit float: at least 1.4e-45), got 0"},
      {"bad_fp16_min_scale_tiny.json",
       "config: fp16.min_loss_scale must be a number > 0 (a 32-bit float: at least 1.4e-45), got 1e-300"},
      {"bad_beta_float_one.json",
       "config: optimizer.params.betas has a beta that is 1 as a 32-bit float, got [0.9,0.99999999]; the largest "
       "below 1 is 0.99999994"},
      {"bad_fp16_scale_power.json", "config: fp16.initial_scale_power must be an integer 0..126, got 200"},
      {"bad_json.json",
       "config: not valid JSON: parse error at line 1, column 24: syntax error while parsing object key - unexpected "
       "'}'; expected string literal"},
      // Read without the program's values (given them, lr is filled: see the "auto" cases).
      {"bad_lr_auto.json",
       "config: optimizer.params.lr is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; "
       "strata needs a value here"},
      {"bad_lr_negative.json", "config: optimizer.params.lr must be a number >= 0, got -0.001"},
      {"bad_nesterov.json", "config: optimizer.params.nesterov is true, which needs momentum > 0 and dampening 0"},
      {"bad_offload_device.json",
       "config: zero_optimization.offload_optimizer.device must be one of \"cpu\", \"none\", got \"nvme\""},
      {"bad_offload_param.json",
       "config: zero_optimization.offload_param.device is \"nvme\": strata keeps offloaded state in host memory "
       "(\"cpu\"), not on NVMe"},
      {"bad_offload_param_stage.json",
       "config: zero_optimization.offload_param.device \"cpu\" needs zero_optimization.stage 3, as in DeepSpeed (got "
       "2)"},
      {"bad_offload_stage0.json",
       "config: zero_optimization.offload_optimizer.device \"cpu\" needs zero_optimization.stage 1, 2 or 3 (got 0)"},
      {"bad_optimizer_no_type.json",
       "config: optimizer.type is missing (one of \"Adam\", \"AdamW\", \"SGD\", \"Lion\")"},
      {"bad_optimizer_type.json",
       "config: optimizer.type must be one of \"Adam\", \"AdamW\", \"SGD\", \"Lion\" (any case), got \"Lamb\""},
      {"bad_pipeline_schedule.json",
       "config: strata.pipeline_schedule must be one of \"gpipe\", \"1f1b\", got \"interleaved\""},
      {"bad_scheduler_total.json", "config: scheduler.params.total_num_steps is missing (WarmupDecayLR needs it)"},
      {"bad_scheduler_type.json",
       "config: scheduler.type must be one of \"WarmupLR\", \"WarmupDecayLR\", \"WarmupCosineLR\", got \"OneCycle\""},
      {"bad_steps_per_print.json", "config: steps_per_print must be an integer >= 1, got true"},
      {"bad_tensor_parallel.json", "config: strata.tensor_parallel_size must be an integer >= 1, got 0"},
      {"bad_top_level.json", "config: the top level must be a JSON object, got [{\"train_batch_size\":8}]"},
      {"bad_warmup_type.json",
       "config: scheduler.params.warmup_type must be one of \"log\", \"linear\", got \"cosine\""},
      {"bad_zero_section_type.json", "config: zero_optimization must be an object, got 3"},
      {"bad_zero_stage_range.json", "config: zero_optimization.stage must be an integer 0..3, got 4"},
      {"bad_zero_stage_type.json", "config: zero_optimization.stage must be an integer 0..3, got \"two\""},
  };
  // Every bad_*.json has an expected message (a new file without one fails here).
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(configs)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("bad_", 0) != 0) continue;
    ++files;
    INFO(name);
    REQUIRE(expected.count(name) == 1);
    CHECK(config_error_of(io_test::read_bytes(e.path())) == expected.at(name));
  }
  CHECK(files == static_cast<int>(expected.size()));
  CHECK(files >= 10);
}

TEST_CASE("load_config names the file in its messages") {
  const auto bad = configs / "bad_zero_stage_type.json";
  CHECK(error_of<config_error>([&] { strata::load_config(bad); }) ==
        bad.string() + ": zero_optimization.stage must be an integer 0..3, got \"two\"");
  const auto none = configs / "does_not_exist.json";
  CHECK(error_of<config_error>([&] { strata::load_config(none); }) == none.string() + ": cannot open the config file");
}
