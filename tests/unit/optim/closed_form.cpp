// One optimizer step (two for momentum) against values worked out in closed form, in
// double, from the definitions of torch.optim.SGD / AdamW and Lion.
#include <cmath>
#include <vector>

#include "catch.hpp"
#include "strata/optim/adamw.hpp"
#include "strata/optim/lion.hpp"
#include "strata/optim/sgd.hpp"

namespace {

const std::vector<float> p0 = {1.0f, -0.5f, 0.25f, 2.0f, -3.0f, 0.0f, 0.75f, -1.25f};
const std::vector<float> g1 = {0.1f, -0.2f, 0.3f, -1e-3f, 4.0f, 0.5f, 0.0f, -2.5f};
const std::vector<float> g2 = {-0.3f, 0.1f, 0.2f, 2e-3f, -1.0f, 0.25f, 1.0f, 0.5f};
const std::size_t n = p0.size();

// A step is a handful of fp32 roundings of quantities of size |p| and |update|, each
// within 2^-24 relative: 1e-6 of their sum is a bound with a few-fold margin.
bool close(float got, double want, double scale) { return std::fabs(double{got} - want) <= 1e-6 * scale; }

template <class O>
void step(const O& o, std::vector<float>& p, const std::vector<float>& g, std::vector<float>& s0,
          std::vector<float>& s1, float lr, bool decay, long t) {
  o.step(strata::shard_args<float, float>{p.data(), g.data(), s0.data(), s1.data(), nullptr, n}, lr, 1.0f, decay, t);
}

}  // namespace

TEST_CASE("sgd, one step: p - lr (g + wd p)") {
  const double lr = 0.1, wd = 0.01;
  for (bool decay : {false, true}) {
    std::vector<float> p = p0, buf(n), unused(n);
    step(strata::sgd{.weight_decay = 0.01f}, p, g1, buf, unused, float(lr), decay, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double d = g1[i] + (decay ? wd * p0[i] : 0.0);
      INFO("decay " << decay << " element " << i);
      CHECK(close(p[i], p0[i] - lr * d, std::fabs(p0[i]) + std::fabs(lr * d)));
    }
  }
}

TEST_CASE("sgd with momentum: buffer starts at the first grad, then mu buf + (1 - dampening) g") {
  const double lr = 0.05, mu = 0.9, damp = 0.1;
  std::vector<float> p = p0, buf(n), unused(n);
  const strata::sgd o{.momentum = 0.9f, .dampening = 0.1f};
  step(o, p, g1, buf, unused, float(lr), true, 1);
  for (std::size_t i = 0; i < n; ++i) {
    INFO("step 1 element " << i);
    CHECK(close(buf[i], g1[i], std::fabs(g1[i])));  // no dampening on the first step, as torch
    CHECK(close(p[i], p0[i] - lr * g1[i], std::fabs(p0[i]) + 1.0));
  }
  step(o, p, g2, buf, unused, float(lr), true, 2);
  for (std::size_t i = 0; i < n; ++i) {
    const double b2 = mu * g1[i] + (1 - damp) * g2[i];
    INFO("step 2 element " << i);
    CHECK(close(buf[i], b2, std::fabs(mu * g1[i]) + std::fabs(g2[i])));
    CHECK(close(p[i], p0[i] - lr * g1[i] - lr * b2, std::fabs(p0[i]) + 1.0));
  }
}

TEST_CASE("sgd nesterov: p - lr (d + mu buf)") {
  const double lr = 0.05, mu = 0.8, wd = 0.02;
  std::vector<float> p = p0, buf(n), unused(n);
  const strata::sgd o{.momentum = 0.8f, .nesterov = true, .weight_decay = 0.02f};
  step(o, p, g1, buf, unused, float(lr), true, 1);
  std::vector<double> b(n), pd(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double d = g1[i] + wd * p0[i];
    b[i] = d;
    pd[i] = p0[i] - lr * (d + mu * d);
    INFO("step 1 element " << i);
    CHECK(close(p[i], pd[i], std::fabs(p0[i]) + 1.0));
  }
  step(o, p, g2, buf, unused, float(lr), true, 2);
  for (std::size_t i = 0; i < n; ++i) {
    const double d = g2[i] + wd * pd[i];
    const double bi = mu * b[i] + d;
    INFO("step 2 element " << i);
    CHECK(close(buf[i], bi, std::fabs(mu * b[i]) + std::fabs(d)));
    CHECK(close(p[i], pd[i] - lr * (d + mu * bi), std::fabs(pd[i]) + 1.0));
  }
}

TEST_CASE("adamw, first step: p (1 - lr wd) - lr g / (|g| + eps)") {
  // With m = v = 0, bias correction turns m into g and sqrt(v) into |g| exactly.
  const double lr = 1e-3, wd = 0.1, eps = 1e-8, b1 = 0.9, b2 = 0.999;
  for (bool decay : {true, false}) {
    std::vector<float> p = p0, m(n), v(n);
    step(strata::adamw{.weight_decay = 0.1f}, p, g1, m, v, float(lr), decay, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double g = g1[i];
      const double want = p0[i] * (1 - lr * (decay ? wd : 0.0)) - lr * g / (std::fabs(g) + eps);
      INFO("decay " << decay << " element " << i << " got " << p[i] << " want " << want);
      CHECK(close(p[i], want, std::fabs(p0[i]) + lr));
      CHECK(close(m[i], (1 - b1) * g, std::fabs(g)));
      CHECK(close(v[i], (1 - b2) * g * g, g * g));
    }
  }
}

TEST_CASE("adamw, second step: bias-corrected moments") {
  const double lr = 1e-2, wd = 0.01, eps = 1e-8, b1 = 0.9, b2 = 0.999;
  std::vector<float> p = p0, m(n), v(n);
  const strata::adamw o{};  // defaults: 0.9, 0.999, 1e-8, 0.01
  step(o, p, g1, m, v, float(lr), true, 1);
  step(o, p, g2, m, v, float(lr), true, 2);
  for (std::size_t i = 0; i < n; ++i) {
    const double a = g1[i], b = g2[i];
    double pd = p0[i] * (1 - lr * wd) - lr * a / (std::fabs(a) + eps);
    const double m2 = b1 * (1 - b1) * a + (1 - b1) * b;
    const double v2 = b2 * (1 - b2) * a * a + (1 - b2) * b * b;
    const double mhat = m2 / (1 - b1 * b1), vhat = v2 / (1 - b2 * b2);
    pd = pd * (1 - lr * wd) - lr * mhat / (std::sqrt(vhat) + eps);
    INFO("element " << i << " got " << p[i] << " want " << pd);
    CHECK(close(p[i], pd, std::fabs(p0[i]) + lr));
  }
}

TEST_CASE("lion, one step: p (1 - lr wd) - lr sign((1 - b1) g), m = (1 - b2) g") {
  const double lr = 1e-4, wd = 0.5, b2 = 0.99;
  for (bool decay : {true, false}) {
    std::vector<float> p = p0, m(n), unused(n);
    step(strata::lion{.weight_decay = 0.5f}, p, g1, m, unused, float(lr), decay, 1);
    for (std::size_t i = 0; i < n; ++i) {
      const double s = g1[i] > 0 ? 1.0 : (g1[i] < 0 ? -1.0 : 0.0);
      INFO("decay " << decay << " element " << i);
      CHECK(close(p[i], p0[i] * (1 - lr * (decay ? wd : 0.0)) - lr * s, std::fabs(p0[i]) + lr));
      CHECK(close(m[i], (1 - b2) * g1[i], std::fabs(g1[i])));
    }
  }
}

TEST_CASE("grad_scale multiplies the gradient before anything else") {
  // SGD without momentum: one step with grads g and scale s equals one with s g.
  std::vector<float> a = p0, b = p0, buf(n), unused(n), scaled(n);
  for (std::size_t i = 0; i < n; ++i) scaled[i] = g1[i] * 0.125f;
  strata::sgd{.weight_decay = 0.01f}.step(
      strata::shard_args<float, float>{a.data(), g1.data(), buf.data(), nullptr, nullptr, n}, 0.1f, 0.125f, true, 1);
  step(strata::sgd{.weight_decay = 0.01f}, b, scaled, buf, unused, 0.1f, true, 1);
  CHECK(a == b);
}

TEST_CASE("optimizers reject hyperparameters torch rejects, naming them") {
  std::vector<float> p = p0, s0(n), s1(n);
  const strata::shard_args<float, float> a{p.data(), g1.data(), s0.data(), s1.data(), nullptr, n};
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const strata::config_error& e) {
      return e.what();
    }
    return "no error";
  };
  CHECK(message([&] { strata::adamw{.beta1 = 1.0f}.step(a, 1e-3f, 1.0f, true, 1); }).find("beta1") !=
        std::string::npos);
  CHECK(message([&] { strata::adamw{.eps = -1.0f}.step(a, 1e-3f, 1.0f, true, 1); }).find("eps") != std::string::npos);
  CHECK(message([&] { strata::adamw{}.step(a, -1e-3f, 1.0f, true, 1); }).find("learning rate") != std::string::npos);
  CHECK(message([&] { strata::adamw{}.step(a, 1e-3f, 1.0f, true, 0); }).find("step") != std::string::npos);
  CHECK(message([&] { strata::adamw{}.step(a, 1e-3f, NAN, true, 1); }).find("grad_scale") != std::string::npos);
  CHECK(message([&] { strata::sgd{.nesterov = true}.step(a, 1e-3f, 1.0f, true, 1); }).find("nesterov") !=
        std::string::npos);
  CHECK(message([&] { strata::lion{.beta2 = -0.5f}.step(a, 1e-3f, 1.0f, true, 1); }).find("beta2") !=
        std::string::npos);
  // A 16-bit param without its output buffer is a programming error, not a config one.
  std::vector<strata::bf16> g16(n);
  CHECK_THROWS_AS(strata::adamw{}.step(strata::shard_args<strata::bf16, strata::bf16>{p.data(), g16.data(), s0.data(),
                                                                                      s1.data(), nullptr, n},
                                       1e-3f, 1.0f, true, 1),
                  strata::error);
}
