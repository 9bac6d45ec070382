// Helpers shared by the nn/ tests: params bound to storage the test owns, seeded random
// tensors, a tiny context, a counter of heap allocations, and the gradient checks.
// Include from exactly one .cpp per test executable (it replaces global operator new).
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <limits>
#include <new>
#include <random>
#include <string>
#include <vector>

#include <strata/model/param.hpp>
#include <strata/space/host.hpp>
#include <strata/space/tensor.hpp>

#include "catch.hpp"

// Every operator new in the process is counted, so a test can assert that a second
// forward/backward of the same shape allocates nothing at all (not only tensors).
// noinline: GCC otherwise inlines free() into callers of delete and mistakes it for a
// mismatched deallocation (-Wmismatched-new-delete).
inline std::atomic<long> g_heap_allocations{0};
[[gnu::noinline]] void* operator new(std::size_t n) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

// Portable across Catch2 v2 and v3 (whose matchers and Approx differ), with the values
// in the failure message.
#define CHECK_CONTAINS(text, part)                \
  do {                                            \
    const std::string text_ = (text);             \
    INFO(text_);                                  \
    CHECK(text_.find(part) != std::string::npos); \
  } while (0)
#define CHECK_REL(a, b, rel)                                                  \
  do {                                                                        \
    const double a_ = (a), b_ = (b);                                          \
    INFO(a_ << " vs " << b_);                                                 \
    CHECK(std::abs(a_ - b_) <= (rel) * std::max(std::abs(a_), std::abs(b_))); \
  } while (0)
#define CHECK_ABS(a, b, tol)           \
  do {                                 \
    const double a_ = (a), b_ = (b);   \
    INFO(a_ << " vs " << b_);          \
    CHECK(std::abs(a_ - b_) <= (tol)); \
  } while (0)

namespace nn_test {

using strata::param;
using strata::shape;
using strata::tensor;

// The trainer's context as far as layers see it: the current micro-batch's targets.
struct context {
  tensor<float> t;
  const tensor<float>& targets() const { return t; }
};

inline tensor<float> random_tensor(const shape& s, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  tensor<float> t(s);
  std::uniform_real_distribution<float> u(lo, hi);
  for (auto& v : t.span()) v = u(rng);
  return t;
}

inline tensor<float> tensor_of(const shape& s, std::initializer_list<float> values) {
  tensor<float> t(s);
  REQUIRE(values.size() == t.numel());
  std::size_t i = 0;
  for (float v : values) t[i++] = v;
  return t;
}

// Storage for params, owned by the test (the model layout is not used here): data is
// filled from the param's size with uniform values, grads start at zero.
struct param_store {
  std::deque<std::vector<float>> blocks;  // deque: addresses stay put as it grows
  void bind(param<float>& p, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
    auto& d = blocks.emplace_back(p.numel());
    auto& g = blocks.emplace_back(p.numel());
    std::uniform_real_distribution<float> u(lo, hi);
    for (auto& v : d) v = u(rng);
    p.data_ptr = d.empty() ? nullptr : d.data();
    p.grad_ptr = g.empty() ? nullptr : g.data();
  }
};

inline void zero_grads(const std::vector<param<float>*>& ps) {
  for (auto* p : ps)
    for (auto& g : p->grads()) g = 0.0f;
}

// f = sum(y * r) in double, from a fresh forward: the scalar whose gradient w.r.t. the
// params and x is exactly what backward computes when it is given dy = r.
template <class Layer, class Ctx>
double objective(const Layer& layer, Ctx& ctx, const tensor<float>& x, const tensor<float>& r) {
  typename Layer::cache c;
  tensor<float> y;
  layer.forward(ctx, x, y, c);
  REQUIRE(y.shape() == r.shape());
  double f = 0.0;
  for (std::size_t i = 0; i < y.numel(); ++i) f += static_cast<double>(y[i]) * r[i];
  return f;
}

// Central differences on float layers. f is evaluated from float outputs, so its
// rounding error is amplified by 1 / (2h), and the truncation error is h^2 / 6 * |f'''|.
// With unit-scale data, n outputs and dot products of length K, f's rounding error is
// about 2^-24 * sqrt(n * K) (random-walk accumulation): for n = K = 64 that is 4e-6,
// which h = 2^-7 turns into 2.5e-4; truncation is h^2 / 6 ~ 1e-5 times a third
// derivative of order one. The default tolerance, 1e-3 absolute plus 1e-3 relative, is
// four times that budget and still two orders below the error of a wrong transpose, a
// missing term or factor. Larger cases scale abs_tol with sqrt(n).
struct fd_options {
  double h = 1.0 / 128;
  double abs_tol = 1e-3;
  double rel_tol = 1e-3;
  bool check_dx = true;
  std::size_t stride = 1;  // check every stride-th element (large tensors)
};

struct fd_report {
  double max_abs_err = 0.0;
  std::size_t checked = 0;
};

namespace detail {
// Perturbs v by +-h, using the perturbation float arithmetic actually made.
template <class Eval>
double central_difference(float& v, double h, Eval&& eval) {
  const float orig = v;
  v = static_cast<float>(orig + h);
  const double hp = static_cast<double>(v) - orig;
  const double fp = eval();
  v = static_cast<float>(orig - h);
  const double hm = orig - static_cast<double>(v);
  const double fm = eval();
  v = orig;
  return (fp - fm) / (hp + hm);
}
}  // namespace detail

// Runs backward with dy = r (random) and compares every param grad (and dx) with central
// differences of sum(y * r). dx is pre-filled with NaN so that a layer which reads or
// accumulates into dx instead of writing it fails.
template <class Layer, class Ctx>
fd_report check_gradients(Layer& layer, Ctx& ctx, tensor<float>& x, const std::vector<param<float>*>& ps,
                          std::mt19937& rng, fd_options o = {}) {
  typename Layer::cache c;
  tensor<float> y, dx;
  layer.forward(ctx, x, y, c);
  const tensor<float> r = random_tensor(y.shape(), rng, 0.25f, 1.0f);
  zero_grads(ps);
  dx.resize(x.shape());
  for (auto& v : dx.span()) v = std::numeric_limits<float>::quiet_NaN();
  layer.backward(ctx, r, dx, c);
  REQUIRE(dx.shape() == x.shape());

  fd_report rep;
  const auto eval = [&] { return objective(layer, ctx, x, r); };
  const auto compare = [&](const char* what, std::size_t i, double analytic, double numeric) {
    const double err = std::abs(analytic - numeric);
    rep.max_abs_err = std::max(rep.max_abs_err, err);
    ++rep.checked;
    INFO(what << "[" << i << "]: backward " << analytic << ", finite difference " << numeric);
    REQUIRE(err <= o.abs_tol + o.rel_tol * std::abs(numeric));
  };
  for (auto* p : ps)
    for (std::size_t i = 0; i < p->numel(); i += o.stride)
      compare(p->name.empty() ? "param" : p->name.c_str(), i, p->grad()[i],
              detail::central_difference(p->data()[i], o.h, eval));
  if (o.check_dx)
    for (std::size_t i = 0; i < x.numel(); i += o.stride)
      compare("dx", i, dx[i], detail::central_difference(x[i], o.h, eval));
  // STRATA_TEST_VERBOSE=1 prints how much of the tolerance the check used.
  if (std::getenv("STRATA_TEST_VERBOSE"))
    std::printf("finite differences: %zu elements, max |backward - fd| = %.3g (abs_tol %.3g)\n", rep.checked,
                rep.max_abs_err, o.abs_tol);
  return rep;
}

// backward adds into param grads: grads holding g0 end as g0 + g, with g what a zeroed
// backward produces; and a second backward from the same cache adds g again.
template <class Layer, class Ctx>
void check_accumulates(Layer& layer, Ctx& ctx, const tensor<float>& x, const std::vector<param<float>*>& ps,
                       std::mt19937& rng) {
  typename Layer::cache c;
  tensor<float> y, dx;
  layer.forward(ctx, x, y, c);
  const tensor<float> r = random_tensor(y.shape(), rng);
  zero_grads(ps);
  layer.backward(ctx, r, dx, c);
  std::vector<std::vector<float>> g, g0;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto* p : ps) {
    g.emplace_back(p->grads().begin(), p->grads().end());
    auto& start = g0.emplace_back();
    for (auto& v : p->grads()) start.push_back(v = u(rng));
  }
  layer.forward(ctx, x, y, c);
  layer.backward(ctx, r, dx, c);
  layer.backward(ctx, r, dx, c);
  for (std::size_t k = 0; k < ps.size(); ++k)
    for (std::size_t i = 0; i < ps[k]->numel(); ++i) {
      const double want = g0[k][i] + 2.0 * g[k][i];
      // A few float roundings of values of order |g0| + 2|g|.
      REQUIRE(std::abs(ps[k]->grad()[i] - want) <= 1e-6 * (1.0 + std::abs(g0[k][i]) + 2.0 * std::abs(g[k][i])));
    }
}

// A second forward + backward of the same shapes reuses y, dx and the cache: same
// pointers, same capacities, and not one heap or host-space allocation.
template <class Layer, class Ctx>
void check_no_allocation(Layer& layer, Ctx& ctx, const tensor<float>& x, std::mt19937& rng) {
  typename Layer::cache c;
  tensor<float> y, dx;
  layer.forward(ctx, x, y, c);
  const tensor<float> r = random_tensor(y.shape(), rng);
  layer.backward(ctx, r, dx, c);
  const float *yp = y.data(), *dxp = dx.data();
  const auto ycap = y.capacity(), dxcap = dx.capacity();
  const auto host_allocs = strata::host::counters().allocations.load();
  const auto heap_allocs = g_heap_allocations.load();
  layer.forward(ctx, x, y, c);
  layer.backward(ctx, r, dx, c);
  const auto heap_after = g_heap_allocations.load();
  const auto host_after = strata::host::counters().allocations.load();
  CHECK(heap_after == heap_allocs);
  CHECK(host_after == host_allocs);
  CHECK(y.data() == yp);
  CHECK(y.capacity() == ycap);
  CHECK(dx.data() == dxp);
  CHECK(dx.capacity() == dxcap);
}

// Runs f and returns the strata exception's message (fails the test if none is thrown).
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL("no exception was thrown");
  return {};
}

}  // namespace nn_test
