// The dynamic loss scaler follows DeepSpeed's DynamicLossScaler step for step:
// hysteresis delays the first cut, a window of clean steps doubles the scale, the scale
// never drops below the minimum, and the state round-trips through a checkpoint.
#include <cmath>

#include "catch.hpp"
#include "strata/optim/loss_scaler.hpp"

using strata::loss_scaler;
using strata::loss_scaler_options;

TEST_CASE("defaults: 2^16, window 1000, hysteresis 2, minimum 1") {
  const loss_scaler s;
  CHECK(s.dynamic());
  CHECK(s.scale() == 65536.0f);
  CHECK(s.options().loss_scale_window == 1000);
  CHECK(s.options().hysteresis == 2);
  CHECK(s.options().min_loss_scale == 1.0f);
}

TEST_CASE("hysteresis 2: the first overflow is skipped without a cut, the second halves") {
  loss_scaler s;
  CHECK_FALSE(s.update(true));  // skipped, scale kept, hysteresis 2 -> 1
  CHECK(s.scale() == 65536.0f);
  CHECK_FALSE(s.update(true));  // skipped, halved
  CHECK(s.scale() == 32768.0f);
  CHECK_FALSE(s.update(true));  // hysteresis is not restored by the cut (consecutive_hysteresis false)
  CHECK(s.scale() == 16384.0f);
  CHECK(s.update(false));  // a clean step is applied and does not restore it either
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 8192.0f);
}

TEST_CASE("hysteresis 1 halves on every overflow") {
  loss_scaler s({.hysteresis = 1});
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 32768.0f);
}

TEST_CASE("a window of clean steps since the last overflow doubles the scale and restores hysteresis") {
  loss_scaler s({.initial_scale_power = 4, .loss_scale_window = 5});
  // DeepSpeed grows when (iteration - last_overflow) % window == 0, counting iterations
  // from 0 and the last overflow from -1: the 5th clean step grows.
  for (int i = 0; i < 4; ++i) CHECK(s.update(false));
  CHECK(s.scale() == 16.0f);
  CHECK(s.update(false));
  CHECK(s.scale() == 32.0f);
  for (int i = 0; i < 5; ++i) s.update(false);
  CHECK(s.scale() == 64.0f);

  // An overflow at iteration 10 restarts the window: growth at iteration 15.
  CHECK_FALSE(s.update(true));  // hysteresis 2 -> 1, no cut
  CHECK(s.scale() == 64.0f);
  for (int i = 0; i < 4; ++i) s.update(false);
  CHECK(s.scale() == 64.0f);
  s.update(false);
  CHECK(s.scale() == 128.0f);
  // ...and the growth restored the hysteresis: the next overflow again only spends it.
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 128.0f);
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 64.0f);
}

TEST_CASE("consecutive_hysteresis restores hysteresis after any clean step") {
  loss_scaler s({.hysteresis = 2, .consecutive_hysteresis = true});
  s.update(true);
  s.update(false);
  CHECK_FALSE(s.update(true));
  CHECK(s.scale() == 65536.0f);  // the clean step in between gave the hysteresis back
}

TEST_CASE("the scale stops at the minimum, and an overflow there is an error unless allowed") {
  loss_scaler s({.initial_scale_power = 2, .hysteresis = 1, .min_loss_scale = 2.0f});
  s.update(true);
  CHECK(s.scale() == 2.0f);
  CHECK_THROWS_AS(s.update(true), strata::error);

  loss_scaler t({.initial_scale_power = 2, .hysteresis = 1, .min_loss_scale = 2.0f, .raise_error_at_min_scale = false});
  t.update(true);
  CHECK_FALSE(t.update(true));
  CHECK(t.scale() == 2.0f);
}

TEST_CASE("a static scale never changes but overflowed steps are still skipped") {
  loss_scaler s({.loss_scale = 128.0f});
  CHECK_FALSE(s.dynamic());
  CHECK(s.scale() == 128.0f);
  CHECK_FALSE(s.update(true));
  int applied = 0;
  for (int i = 0; i < 3000; ++i) applied += s.update(false);
  CHECK(applied == 3000);
  CHECK(s.scale() == 128.0f);
}

TEST_CASE("save / restore resumes the same sequence") {
  loss_scaler a({.loss_scale_window = 7});
  for (int i = 0; i < 20; ++i) a.update(i % 9 == 4);
  loss_scaler b({.loss_scale_window = 7});
  b.restore(a.save());
  CHECK(b.save() == a.save());
  for (int i = 0; i < 50; ++i) {
    const bool o = i % 11 == 3;
    CHECK(a.update(o) == b.update(o));
    CHECK(a.scale() == b.scale());
  }
  CHECK_THROWS_AS(b.restore({.scale = -1.0f}), strata::checkpoint_error);
}

TEST_CASE("bad options are config errors naming the key") {
  auto msg = [](loss_scaler_options o) -> std::string {
    try {
      loss_scaler s(o);
    } catch (const strata::config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(msg({.loss_scale_window = 0}).find("loss_scale_window") != std::string::npos);
  CHECK(msg({.hysteresis = 0}).find("hysteresis") != std::string::npos);
  CHECK(msg({.min_loss_scale = 0}).find("min_loss_scale") != std::string::npos);
  CHECK(msg({.loss_scale = -2}).find("loss_scale") != std::string::npos);
}
