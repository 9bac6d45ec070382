// Learning-rate schedules against DeepSpeed's formulas (WarmupLR, WarmupDecayLR,
// WarmupCosineLR) evaluated by hand at chosen steps, and validation naming the field.
#include <cmath>
#include <numbers>
#include <string>

#include "catch.hpp"
#include "strata/optim/schedule.hpp"

using strata::lr_schedule;

namespace {
// lr() returns a float computed in double: compare within float rounding.
bool close(float got, double want) { return std::fabs(double{got} - want) <= 1e-7 * std::fabs(want) + 1e-12; }

std::string error_of(auto&& fn) {
  try {
    fn();
  } catch (const strata::config_error& e) {
    return e.what();
  }
  return "no error";
}
}  // namespace

TEST_CASE("constant") {
  const auto s = lr_schedule::constant(3e-4);
  CHECK(close(s.lr(0), 3e-4));
  CHECK(close(s.lr(123456), 3e-4));
}

TEST_CASE("WarmupLR, linear: min + (max - min) k / N, then max") {
  const auto s = lr_schedule::linear_warmup(1e-5, 1e-3, 10, lr_schedule::warmup_curve::linear);
  CHECK(close(s.lr(0), 1e-5));
  CHECK(close(s.lr(5), 1e-5 + (1e-3 - 1e-5) * 0.5));
  CHECK(close(s.lr(9), 1e-5 + (1e-3 - 1e-5) * 0.9));
  CHECK(close(s.lr(10), 1e-3));
  CHECK(close(s.lr(1000), 1e-3));
}

TEST_CASE("WarmupLR, log (DeepSpeed's default): min + (max - min) ln(k + 1) / ln(N)") {
  const auto s = lr_schedule::linear_warmup(0.0, 1e-3, 100);
  CHECK(close(s.lr(0), 0.0));
  CHECK(close(s.lr(9), 1e-3 * std::log(10.0) / std::log(100.0)));  // = 0.5e-3
  CHECK(close(s.lr(9), 0.5e-3));
  CHECK(close(s.lr(99), 1e-3));
  CHECK(close(s.lr(100), 1e-3));
  // DeepSpeed warms up over at least 2 steps: N = max(2, warmup_num_steps).
  const auto one = lr_schedule::linear_warmup(0.0, 1.0, 1, lr_schedule::warmup_curve::linear);
  CHECK(close(one.lr(1), 0.5));
  CHECK(close(one.lr(2), 1.0));
}

TEST_CASE("WarmupDecayLR: warmup, then linear decay reaching 0 at total_num_steps") {
  const auto s = lr_schedule::warmup_decay(0.0, 1e-3, 10, 110, lr_schedule::warmup_curve::linear);
  CHECK(close(s.lr(5), 0.5e-3));
  CHECK(close(s.lr(10), 1e-3));                 // (110 - 10) / (110 - 10)
  CHECK(close(s.lr(60), 1e-3 * 50.0 / 100.0));  // halfway down
  CHECK(close(s.lr(109), 1e-3 * 1.0 / 100.0));
  CHECK(close(s.lr(110), 0.0));
  CHECK(close(s.lr(500), 0.0));  // clamped at 0
}

TEST_CASE("WarmupCosineLR: ratio warmup, then a half cosine to cos_min_ratio") {
  const double lr = 2e-3, r0 = 0.1, rmin = 0.01;
  const auto s = lr_schedule::warmup_cosine(lr, 1010, 10, r0, rmin, lr_schedule::warmup_curve::linear);
  CHECK(close(s.lr(0), lr * r0));
  CHECK(close(s.lr(5), lr * (r0 + 0.5 * (1 - r0))));
  // After warmup DeepSpeed counts real_last_step = k - N + 1 over real_total = T - N.
  auto cosine = [&](double done) { return lr * (rmin + (1 - rmin) * (1 + std::cos(std::numbers::pi * done)) / 2); };
  CHECK(close(s.lr(10), cosine(1.0 / 1000)));
  CHECK(close(s.lr(509), cosine(0.5)));
  CHECK(close(s.lr(1009), cosine(1.0)));
  CHECK(close(s.lr(1009), lr * rmin));
  CHECK(close(s.lr(5000), lr * rmin));  // stays at the floor past the end
}

TEST_CASE("schedules check their fields and name the one that is wrong") {
  CHECK(error_of([] { lr_schedule::constant(-1.0); }).find("lr") != std::string::npos);
  CHECK(error_of([] { lr_schedule::linear_warmup(0, NAN, 10); }).find("warmup_max_lr") != std::string::npos);
  CHECK(error_of([] { lr_schedule::linear_warmup(0, 1e-3, 0); }).find("warmup_num_steps") != std::string::npos);
  CHECK(error_of([] { lr_schedule::warmup_decay(0, 1e-3, 10, 0); }).find("total_num_steps") != std::string::npos);
  CHECK(error_of([] { lr_schedule::warmup_cosine(1e-3, 100, 10, 1.5); }).find("warmup_min_ratio") != std::string::npos);
  CHECK(error_of([] { lr_schedule::warmup_cosine(1e-3, 100, 10, 0.0, -0.1); }).find("cos_min_ratio") !=
        std::string::npos);
  CHECK(error_of([] { lr_schedule::parse_warmup_type("cubic"); }).find("warmup_type") != std::string::npos);
  CHECK(lr_schedule::parse_warmup_type("linear") == lr_schedule::warmup_curve::linear);
  CHECK(error_of([] { (void)lr_schedule::constant(1e-3).lr(-1); }).find("step") != std::string::npos);
}
