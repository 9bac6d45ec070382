// A DeepSpeed config mapped onto the trainer (train/from_config.hpp): its options once the
// batch is resolved, the runtime policies and the compile-time ones they dispatch to, and
// the optimizer the config names with its hyperparameters.
#include "strata/train/from_config.hpp"

#include <filesystem>
#include <type_traits>

#include "../io/support.hpp"

using io_test::error_of;
using strata::config_error;
using strata::parse_config;
using strata::run_config;

namespace {
const std::filesystem::path configs = std::filesystem::path(STRATA_TEST_DATA_DIR) / "configs";
}  // namespace

TEST_CASE("a full config maps onto trainer_options once the batch is resolved") {
  run_config c = strata::load_config(configs / "full.json");
  CHECK(error_of<config_error>([&] { strata::to_trainer_options(c); }) ==
        "config: call run_config::resolve(data-parallel size) before to_trainer_options, so that "
        "gradient_accumulation_steps is known");
  c.resolve(4);
  const strata::trainer_options o = strata::to_trainer_options(c);
  CHECK(o.lr == 3e-4f);
  CHECK(o.schedule.type == c.schedule.type);
  for (long k : {0L, 1L, 50L, 100L, 101L, 999L, 5000L}) CHECK(o.schedule.lr(k) == c.schedule.lr(k));
  CHECK(o.max_grad_norm == 1.5f);
  CHECK(o.micro_batches == 4);
  CHECK(o.bucket_elems == 50'000'000);
  CHECK(o.seed == 1234);
  CHECK(o.loss_scaler.initial_scale_power == 12);
  CHECK(o.loss_scaler.loss_scale_window == 500);
  CHECK(o.loss_scaler.hysteresis == 3);
  CHECK(o.loss_scaler.consecutive_hysteresis);
  CHECK(o.loss_scaler.min_loss_scale == 0.5f);
  CHECK(o.rounding == strata::rounding::stochastic);
}

TEST_CASE("ZeRO-3's offload_param becomes the trainer's offload_params") {
  run_config c = strata::parse_config(
      R"({"train_batch_size": 8, "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}})");
  c.resolve(2);
  CHECK(strata::to_trainer_options(c).offload_params);
  run_config none = strata::parse_config(R"({"train_batch_size": 8, "zero_optimization": {"stage": 3}})");
  none.resolve(2);
  CHECK_FALSE(strata::to_trainer_options(none).offload_params);
}

TEST_CASE("micro_batches follow the batch resolved last") {
  run_config c = parse_config(R"({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})");
  c.resolve(4);
  CHECK(strata::to_trainer_options(c).micro_batches == 4);
  c.resolve(2);
  CHECK(strata::to_trainer_options(c).micro_batches == 8);
}

TEST_CASE("a config's default bucket size is the trainer's") {
  run_config c = parse_config(R"({"train_batch_size": 8})");
  c.resolve(1);
  CHECK(c.reduce_bucket_size == strata::default_bucket_elems);
  CHECK(strata::to_trainer_options(c).bucket_elems == strata::trainer_options{}.bucket_elems);
}

TEST_CASE("a config maps onto the runtime policies and dispatches to the compile-time ones") {
  const run_config c = strata::load_config(configs / "full.json");
  const strata::runtime_policies p = strata::to_runtime_policies(c);
  CHECK(p.zero_stage == 3);
  CHECK(p.offload);
  CHECK(p.precision == "fp16");
  CHECK(p.optimizer == "adamw");
  const bool right = strata::dispatch(c, [](auto s, auto o, auto pr) {
    return std::is_same_v<typename decltype(s)::type, strata::zero<3, strata::offload_optimizer>> &&
           std::is_same_v<typename decltype(o)::type, strata::adamw> &&
           std::is_same_v<typename decltype(pr)::type, strata::mixed<strata::fp16>>;
  });
  CHECK(right);
}

TEST_CASE("the optimizer a config names, with its hyperparameters; another is refused") {
  const run_config c = strata::load_config(configs / "full.json");
  const strata::adamw a = strata::to_optimizer<strata::adamw>(c);
  CHECK(a.beta1 == 0.8f);
  CHECK(a.weight_decay == 0.1f);
  CHECK(error_of<config_error>([&] { strata::to_optimizer<strata::sgd>(c); }) == "config: optimizer is adamw, not sgd");

  const run_config s = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "sgd", "params":
      {"lr": 0.1, "momentum": 0.9, "dampening": 0, "weight_decay": 1e-4, "nesterov": true}}})");
  const strata::sgd sp = strata::to_optimizer<strata::sgd>(s);
  CHECK(sp.momentum == 0.9f);
  CHECK(sp.dampening == 0.0f);
  CHECK(sp.weight_decay == 1e-4f);
  CHECK(sp.nesterov);
  CHECK(strata::to_runtime_policies(s).optimizer == "sgd");

  const run_config l = parse_config(R"({"train_batch_size": 8, "optimizer": {"type": "LION", "params":
      {"lr": 1e-4, "betas": [0.95, 0.98], "weight_decay": 0.5}}})");
  const strata::lion lp = strata::to_optimizer<strata::lion>(l);
  CHECK(lp.beta1 == 0.95f);
  CHECK(lp.beta2 == 0.98f);
  CHECK(lp.weight_decay == 0.5f);
  CHECK(strata::to_runtime_policies(l).optimizer == "lion");
}
