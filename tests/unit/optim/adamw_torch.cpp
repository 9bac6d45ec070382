// 10 AdamW steps against torch.optim.AdamW, replayed from the fixture that
// tests/tools/make_adamw_fixture.py wrote with PyTorch (two param groups, with and without
// weight decay, a changing lr, grads from 1e-9 to 1e2).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "catch.hpp"
#include "strata/optim/adamw.hpp"

namespace {

std::vector<float> floats(const nlohmann::json& j) {
  std::vector<float> v;
  for (const auto& x : j) v.push_back(static_cast<float>(x.get<double>()));  // exact: fixture values are float32
  return v;
}

// Tolerance against torch. Both sides do fp32 arithmetic from the same decimal
// hyperparameters on the same inputs, but not the same operations: torch updates m with
// lerp (an FMA in its AVX2 kernel) where strata computes beta1 m + (1 - beta1) g, and
// divides sqrt(v) by sqrt(bc2) where strata multiplies by the reciprocal. Each is a few
// fp32 roundings (2^-24 ~ 6e-8 relative) of its operands per step, so after 10 steps:
//   v (a sum of positive terms): within 1e-6 relative;
//   m (a sum that can cancel to near 0): within 1e-6 relative plus 2e-7 of the largest
//     grad seen, the size of its operands (10 steps x 0.1 g x 3 roundings x 6e-8);
//   p: within 1e-6 relative plus 1e-6 of the sum of the lrs so far, since each step
//     moves p by at most about lr and computes that move to ~1e-7 of itself.
// The test also reports the largest ratio |difference| / tolerance it met.
double excess(double got, double want, double rel, double abs_floor) {
  return std::fabs(got - want) / (rel * std::fabs(want) + abs_floor);
}

}  // namespace

TEST_CASE("adamw: 10 steps match torch.optim.AdamW within fp32 rounding") {
  std::ifstream in(std::string(STRATA_TEST_DATA_DIR) + "/adamw_torch.json");
  REQUIRE(in.good());
  const auto fx = nlohmann::json::parse(in);
  const strata::adamw opt{.beta1 = fx["beta1"].get<float>(),
                          .beta2 = fx["beta2"].get<float>(),
                          .eps = fx["eps"].get<float>(),
                          .weight_decay = fx["weight_decay"].get<float>()};
  const std::size_t n = fx["n"].get<std::size_t>();

  for (const char* group : {"decay", "no_decay"}) {
    const bool decay = std::string(group) == "decay";
    std::vector<float> p = floats(fx["init"][group]), m(n), v(n), max_grad(n);
    REQUIRE(p.size() == n);
    long t = 0;
    double lr_sum = 0, worst = 0;
    for (const auto& s : fx["steps"]) {
      ++t;
      const std::vector<float> g = floats(s["grad"][group]);
      const float lr = s["lr"].get<float>();
      lr_sum += lr;
      for (std::size_t i = 0; i < n; ++i) max_grad[i] = std::max(max_grad[i], std::fabs(g[i]));
      opt.step(strata::shard_args<float, float>{p.data(), g.data(), m.data(), v.data(), nullptr, n}, lr, 1.0f, decay,
               t);
      const std::vector<float> want = floats(s["param"][group]);
      for (std::size_t i = 0; i < n; ++i) {
        const double e = excess(p[i], want[i], 1e-6, 1e-6 * lr_sum);
        worst = std::max(worst, e);
        INFO(group << " step " << t << " element " << i << ": strata " << p[i] << " torch " << want[i]);
        CHECK(e <= 1.0);
      }
    }
    CHECK(t == 10);
    const auto m_want = floats(fx["final_state"][group]["exp_avg"]);
    const auto v_want = floats(fx["final_state"][group]["exp_avg_sq"]);
    for (std::size_t i = 0; i < n; ++i) {
      const double em = excess(m[i], m_want[i], 1e-6, 2e-7 * max_grad[i]);
      const double ev = excess(v[i], v_want[i], 1e-6, 1e-37);
      worst = std::max({worst, em, ev});
      INFO(group << " element " << i << ": m " << m[i] << " vs " << m_want[i] << ", v " << v[i] << " vs " << v_want[i]);
      CHECK(em <= 1.0);
      CHECK(ev <= 1.0);
    }
    WARN(group << ": largest |strata - torch| / tolerance over 10 steps: " << worst);
  }
}
