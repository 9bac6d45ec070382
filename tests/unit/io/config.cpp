// DeepSpeed configs: every supported key lands in its field; batch sizes derive as
// DeepSpeed derives them; each malformed config in tests/data/configs/bad_*.json fails
// with its exact message. (tests/unit/train/from_config.cpp: the mapping onto the trainer.)
#include "strata/io/config.hpp"

#include <filesystem>
#include <map>
#include <typeinfo>

#include "support.hpp"

using io_test::error_of;
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

TEST_CASE("Hugging Face style \"auto\": batch sizes derived, bucket sizes defaulted, the rest refused") {
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
      {"bad_fp16_and_bf16.json", "config: fp16.enabled and bf16.enabled are both true; enable one of them"},
      {"bad_fp16_enabled_type.json", "config: fp16.enabled must be true or false, got \"yes\""},
      {"bad_fp16_min_scale.json", "config: fp16.min_loss_scale must be a number > 0, got 0"},
      {"bad_fp16_scale_power.json", "config: fp16.initial_scale_power must be an integer 0..126, got 200"},
      {"bad_json.json",
       "config: not valid JSON: parse error at line 1, column 24: syntax error while parsing object key - unexpected "
       "'}'; expected string literal"},
      {"bad_lr_auto.json",
       "config: optimizer.params.lr is \"auto\", which the Hugging Face Trainer replaces before DeepSpeed sees it; "
       "strata needs a value here"},
      {"bad_lr_negative.json", "config: optimizer.params.lr must be a number >= 0, got -0.001"},
      {"bad_nesterov.json", "config: optimizer.params.nesterov is true, which needs momentum > 0 and dampening 0"},
      {"bad_offload_device.json",
       "config: zero_optimization.offload_optimizer.device must be one of \"cpu\", \"none\", got \"nvme\""},
      {"bad_offload_param.json",
       "config: zero_optimization.offload_param.device is \"cpu\": strata offloads the optimizer state "
       "(offload_optimizer), not parameters; use \"none\""},
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
