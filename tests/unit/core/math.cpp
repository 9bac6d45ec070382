// strata::math on the host (core/math.hpp) against libm, over a dense sweep of float bit
// patterns (every 509th of the 2^32, both signs, subnormals, the overflow edges) and the
// special values, run in ops<host>::map: the vectorized loops the layers run, at every
// SIMD width this CPU has (space/host_isa.hpp), and compared bit for bit across widths.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "catch.hpp"
#include "strata/core/math.hpp"
#include "strata/nn/gelu.hpp"
#include "strata/space/host_ops.hpp"

namespace {

using strata::host_isa;

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t to_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Distance in units in the last place: floats mapped onto a line of integers on which
// neighbours differ by 1 (-0 and +0 are the same point).
std::int64_t ulps(float a, float b) {
  const auto line = [](float f) -> std::int64_t {
    const std::uint32_t u = to_bits(f);
    return (u & 0x80000000u) ? -static_cast<std::int64_t>(u & 0x7fffffffu) : static_cast<std::int64_t>(u);
  };
  const std::int64_t d = line(a) - line(b);
  return d < 0 ? -d : d;
}

std::vector<float> sweep_inputs() {
  std::vector<float> x;
  for (std::uint64_t u = 0; u < (std::uint64_t{1} << 32); u += 509)
    x.push_back(from_bits(static_cast<std::uint32_t>(u)));
  constexpr float inf = std::numeric_limits<float>::infinity();
  for (float v : {0.0f,
                  -0.0f,
                  inf,
                  -inf,
                  std::numeric_limits<float>::quiet_NaN(),
                  std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(),
                  88.72f,
                  88.7228f,
                  88.73f,
                  -87.33f,
                  -103.97f,
                  -104.0f,
                  1e-30f,
                  -1e-30f,
                  9.0f,
                  -9.0f,
                  10.0f,
                  -10.0f})
    x.push_back(v);
  // Where the layers' inputs live, densely: every float of magnitude in [2^-4, 2^4) at
  // a stride of 61 (the mantissa's low bits all vary).
  for (std::uint32_t u = to_bits(0.0625f); u < to_bits(16.0f); u += 61) {
    x.push_back(from_bits(u));
    x.push_back(-from_bits(u));
  }
  return x;
}

enum class fn { exp, expm1, tanh, erf, sigmoid };

struct apply_fn {
  fn f;
  const float* x;
  float* y;
  void operator()(std::int64_t i) const {
    // One branch per call site is outside the loop's body after unswitching; the loop
    // for each function is also written out below, where the vector forms are checked.
    switch (f) {
      case fn::exp: y[i] = strata::math::exp(x[i]); break;
      case fn::expm1: y[i] = strata::math::expm1(x[i]); break;
      case fn::tanh: y[i] = strata::math::tanh(x[i]); break;
      case fn::erf: y[i] = strata::math::erf(x[i]); break;
      case fn::sigmoid: y[i] = strata::math::sigmoid(x[i]); break;
    }
  }
};

template <auto Math>
struct apply_one {
  const float* x;
  float* y;
  void operator()(std::int64_t i) const { y[i] = Math(x[i]); }
};

float libm(fn f, float x) {
  switch (f) {
    case fn::exp: return std::exp(x);
    case fn::expm1: return std::expm1(x);
    case fn::tanh: return std::tanh(x);
    case fn::erf: return std::erf(x);
    case fn::sigmoid:  // no libm function: the exact value, rounded once
      return static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
  }
  return 0.0f;
}

std::vector<host_isa> widths() {
  std::vector<host_isa> w;
  for (host_isa i : {host_isa::sse2, host_isa::avx2, host_isa::avx512})
    if (i <= strata::detail::cpu_host_isa()) w.push_back(i);
  return w;
}

// Runs f over x at instruction set isa, through the same ops<host>::map the layers use.
template <class F>
std::vector<float> run_at(host_isa isa, const std::vector<float>& x, F make) {
  const host_isa saved = strata::detail::current_host_isa();
  strata::detail::current_host_isa() = isa;
  std::vector<float> y(x.size());
  strata::ops<strata::host>::map({}, static_cast<std::int64_t>(x.size()), make(x.data(), y.data()));
  strata::detail::current_host_isa() = saved;
  return y;
}

std::vector<float> run_fn(host_isa isa, fn f, const std::vector<float>& x) {
  // The vectorized loop of each function alone (a switch inside the body would keep the
  // compiler from calling the vector forms).
  switch (f) {
    case fn::exp: return run_at(isa, x, [](const float* a, float* b) { return apply_one<strata::math::exp>{a, b}; });
    case fn::expm1:
      return run_at(isa, x, [](const float* a, float* b) { return apply_one<strata::math::expm1>{a, b}; });
    case fn::tanh: return run_at(isa, x, [](const float* a, float* b) { return apply_one<strata::math::tanh>{a, b}; });
    case fn::erf: return run_at(isa, x, [](const float* a, float* b) { return apply_one<strata::math::erf>{a, b}; });
    case fn::sigmoid:
      return run_at(isa, x, [](const float* a, float* b) { return apply_one<strata::math::sigmoid>{a, b}; });
  }
  return {};
}

const char* name(fn f) {
  const char* n[] = {"exp", "expm1", "tanh", "erf", "sigmoid"};
  return n[static_cast<int>(f)];
}

}  // namespace

TEST_CASE("math: within 2 ulp of libm over a dense sweep, NaN and infinities as libm gives them") {
  const std::vector<float> x = sweep_inputs();
  for (fn f : {fn::exp, fn::expm1, fn::tanh, fn::erf, fn::sigmoid}) {
    const std::vector<float> y = run_fn(strata::detail::cpu_host_isa(), f, x);
    std::int64_t worst = 0, nan_mismatch = 0;
    float worst_x = 0.0f;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const float want = libm(f, x[i]);
      if (std::isnan(want) || std::isnan(y[i])) {
        nan_mismatch += std::isnan(want) != std::isnan(y[i]);
        continue;
      }
      // Below -88.7, e^-x overflows and sigmoid is 0 (as libm's float formula gives it),
      // not the subnormal the exact value would round to.
      if (f == fn::sigmoid && std::isinf(std::exp(-x[i]))) {
        CHECK(to_bits(y[i]) == 0u);
        continue;
      }
      // Infinities, zeros' signs and overflow thresholds exactly as libm; elsewhere ulps.
      if (std::isinf(want) || std::isinf(y[i]) || want == 0.0f || y[i] == 0.0f) {
        if (to_bits(want) != to_bits(y[i])) {
          INFO(name(f) << "(" << x[i] << ") = " << y[i] << ", libm " << want);
          CHECK(to_bits(want) == to_bits(y[i]));
        }
        continue;
      }
      const std::int64_t d = ulps(y[i], want);
      if (d > worst) worst = d, worst_x = x[i];
    }
    INFO(name(f) << ": worst " << worst << " ulp at x = " << worst_x << " over " << x.size() << " inputs");
    CHECK(nan_mismatch == 0);
    // SLEEF's functions are within 1 ulp of the exact value, libm's within 1 too (glibc's
    // expf, expm1f, tanhf, erff): 2 apart at most. sigmoid is three roundings after exp
    // (1 ulp), against the exact value: 1 + 0.5 + 0.5 and the exp error's growth through
    // the quotient, 3.
    CHECK(worst <= (f == fn::sigmoid ? 3 : 2));
  }
}

TEST_CASE("math: the same bits at every SIMD width, and in a loop's remainder") {
  std::vector<float> x = sweep_inputs();
  x.resize(x.size() - 5);  // a length that leaves a remainder at every width
  for (fn f : {fn::exp, fn::expm1, fn::tanh, fn::erf, fn::sigmoid}) {
    const std::vector<float> base = run_fn(host_isa::sse2, f, x);
    for (host_isa isa : widths()) {
      const std::vector<float> y = run_fn(isa, f, x);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < x.size(); ++i) differ += to_bits(y[i]) != to_bits(base[i]);
      INFO(name(f) << " at " << strata::name_of(isa) << " vs sse2");
      CHECK(differ == 0);
    }
    // The scalar form (what a loop that does not vectorize calls) agrees with the lanes.
    std::size_t differ = 0;
    for (std::size_t i = 0; i < x.size(); i += 7) {
      float one = 0.0f;
      apply_fn{f, &x[i], &one}(0);
      differ += to_bits(one) != to_bits(base[i]);
    }
    INFO(name(f) << ": scalar form vs vector lanes");
    CHECK(differ == 0);
  }
}

TEST_CASE("math: gelu's forms give the same bits at every SIMD width") {
  std::vector<float> x;
  for (int i = -40000; i < 40003; ++i) x.push_back(static_cast<float>(i) * 2.5e-4f);
  using strata::nn::detail::gelu_erf;
  using strata::nn::detail::gelu_tanh;
  const auto all = [&](host_isa isa) {
    std::vector<std::vector<float>> out;
    out.push_back(
        run_at(isa, x, [](const float* a, float* b) { return strata::nn::detail::gelu_forward_fn<gelu_erf>{a, b}; }));
    out.push_back(
        run_at(isa, x, [](const float* a, float* b) { return strata::nn::detail::gelu_forward_fn<gelu_tanh>{a, b}; }));
    return out;
  };
  const auto base = all(host_isa::sse2);
  for (host_isa isa : widths()) {
    const auto y = all(isa);
    for (std::size_t k = 0; k < y.size(); ++k) {
      INFO("form " << k << " at " << strata::name_of(isa));
      CHECK(std::memcmp(y[k].data(), base[k].data(), x.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("STRATA_HOST_SIMD caps the width, never above the CPU's; anything else is the CPU's") {
  const host_isa cpu = strata::detail::cpu_host_isa();
  const auto with = [](const char* v) {
    ::setenv("STRATA_HOST_SIMD", v, 1);
    const host_isa i = strata::detail::initial_host_isa();
    ::unsetenv("STRATA_HOST_SIMD");
    return i;
  };
  CHECK(with("sse2") == host_isa::sse2);
  CHECK(with("avx2") == (cpu < host_isa::avx2 ? cpu : host_isa::avx2));
  CHECK(with("avx512") == cpu);
  CHECK(with("avx1024") == cpu);  // with a warning on stderr
  CHECK(with("") == cpu);
}
