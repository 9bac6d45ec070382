// The update functors run by the host driver (threads, tiles, packed square roots) give
// bitwise the same fp32 results as a plain scalar loop over the documented formula, and
// 16-bit param copies are exactly the round-to-nearest-even of the fp32 master.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/optim/adamw.hpp"
#include "strata/optim/lion.hpp"
#include "strata/optim/sgd.hpp"

using strata::bf16;
using strata::fp16;

namespace {

// Not a multiple of the sqrt tile, of the SIMD width or of the thread count, and above
// the size where the driver goes parallel.
constexpr std::size_t n_big = 100'003;

std::vector<float> values(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

// Grads spanning many binades and both signs, with exact zeros.
std::vector<float> grads(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 6);
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = i % 97 == 0 ? 0.0f : std::ldexp(mant(gen), expo(gen));
  return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct adam_state {
  std::vector<float> p, g, m, v;
};

adam_state adam_inputs(std::size_t n) {
  adam_state s{values(n, 1, -2.0f, 2.0f), grads(n, 2), values(n, 3, -0.1f, 0.1f), values(n, 4, 0.0f, 0.01f)};
  return s;
}

// torch.optim.AdamW's per-element arithmetic, written out plainly (kernels/adamw.hpp).
// Hyperparameters are the decimals a user writes; the step scalars are computed from
// them in double, as torch does in Python (optim/shard.hpp, as_decimal).
struct adamw_hp {
  double beta1, beta2, eps, weight_decay, lr;
};

void adamw_reference(adam_state& s, const adamw_hp& h, float gs, bool decay, long t) {
  const double bc1 = 1.0 - std::pow(h.beta1, double(t));
  const double bc2 = 1.0 - std::pow(h.beta2, double(t));
  const float b1 = float(h.beta1), b2 = float(h.beta2), omb1 = float(1.0 - h.beta1), omb2 = float(1.0 - h.beta2);
  const float dec = float(1.0 - h.lr * (decay ? h.weight_decay : 0.0));
  const float step_size = float(h.lr / bc1), inv_bc2s = float(1.0 / std::sqrt(bc2));
  for (std::size_t i = 0; i < s.p.size(); ++i) {
    const float g = s.g[i] * gs;
    s.m[i] = b1 * s.m[i] + omb1 * g;
    s.v[i] = b2 * s.v[i] + (omb2 * g) * g;
    const float denom = std::sqrt(s.v[i]) * inv_bc2s + float(h.eps);
    s.p[i] = s.p[i] * dec - (step_size * s.m[i]) / denom;
  }
}

}  // namespace

TEST_CASE("adamw: host driver == scalar reference, bitwise, for any thread count") {
  const adamw_hp h{0.9, 0.999, 1e-8, 0.05, 3e-3};
  const strata::adamw o{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.05f};
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (bool decay : {true, false}) {
      for (long t : {1L, 7L}) {
        adam_state ref = adam_inputs(n_big), got = ref;
        adamw_reference(ref, h, 0.5f, decay, t);
        o.step(strata::shard_args<float, float>{got.p.data(), got.g.data(), got.m.data(), got.v.data(), nullptr, n_big},
               3e-3f, 0.5f, decay, t);
        INFO("threads " << threads << " decay " << decay << " step " << t);
        CHECK(same_bits(got.p, ref.p));
        CHECK(same_bits(got.m, ref.m));
        CHECK(same_bits(got.v, ref.v));
      }
    }
  }
}

TEST_CASE("adamw: the fused operator() (CUDA driver form) == the split host form") {
  adam_state a = adam_inputs(4099), b = a;
  strata::kernels::adamw_update<float, float, strata::kernels::write_mode::none> f{
      b.p.data(), b.g.data(), b.m.data(), b.v.data(), nullptr, 1.0f,  0.9f, 0.1f,
      0.999f,     0.001f,     0.9999f,    0.01f,      1.3f,    1e-8f, 0,    0};
  for (std::size_t i = 0; i < b.p.size(); ++i) f(i);
  f.master = a.p.data(), f.exp_avg = a.m.data(), f.exp_avg_sq = a.v.data(), f.grad = a.g.data();
  strata::kernels::run_host(a.p.size(), f);
  CHECK(same_bits(a.p, b.p));
  CHECK(same_bits(a.v, b.v));
}

namespace {
// The vector form over [3, n - 1) as the CUDA driver splits it (kernels/vector_access.hpp):
// a ragged head and tail element by element, whole vectors between; against operator()
// over every element.
template <class P, class G, strata::kernels::write_mode W>
void check_vector_form() {
  namespace k = strata::kernels;
  const std::size_t n = 4101;
  adam_state a = adam_inputs(n), b = a;
  std::vector<G> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = strata::round_to<G>(a.g[i]);
  std::vector<P> out_a(n), out_b(n);
  k::adamw_update<P, G, W> f{a.p.data(), g.data(), a.m.data(), a.v.data(), out_a.data(), 0.5f,  0.9f, 0.1f,
                             0.999f,     0.001f,   0.9999f,    0.01f,      1.3f,         1e-8f, 77,   5};
  REQUIRE(f.vector_aligned());
  const auto [first, last] = k::detail::vector_body(3, n - 1, f.vector_width);
  REQUIRE(first == 4);
  REQUIRE(last == (n - 1) / 4 * 4);
  for (std::size_t i = 3; i < first; ++i) f(i);
  for (std::size_t i = first; i < last; i += f.vector_width) f.step_vector(i);
  for (std::size_t i = last; i < n - 1; ++i) f(i);
  f.master = b.p.data(), f.exp_avg = b.m.data(), f.exp_avg_sq = b.v.data(), f.param_out = out_b.data();
  for (std::size_t i = 3; i < n - 1; ++i) f(i);
  CHECK(same_bits(a.p, b.p));
  CHECK(same_bits(a.m, b.m));
  CHECK(same_bits(a.v, b.v));
  CHECK(std::memcmp(out_a.data(), out_b.data(), n * sizeof(P)) == 0);
  // One array off its alignment: no vector form.
  f.exp_avg = b.m.data() + 1;
  CHECK_FALSE(f.vector_aligned());
}
}  // namespace

TEST_CASE("adamw: the vector form (the CUDA driver's, where aligned) == operator(), bitwise") {
  namespace k = strata::kernels;
  check_vector_form<float, float, k::write_mode::none>();
  check_vector_form<bf16, bf16, k::write_mode::nearest_even>();
  check_vector_form<bf16, float, k::write_mode::stochastic>();
  check_vector_form<fp16, fp16, k::write_mode::nearest_even>();
  check_vector_form<fp16, bf16, k::write_mode::stochastic>();
}

TEST_CASE("vector_body: whole vectors inside any range, ragged ends shorter than one") {
  for (std::size_t w : {2u, 4u, 8u})
    for (std::size_t begin = 0; begin < 20; ++begin)
      for (std::size_t end = begin; end < 24; ++end) {
        const auto [first, last] = strata::kernels::detail::vector_body(begin, end, w);
        INFO("w " << w << " [" << begin << ", " << end << ")");
        CHECK(begin <= first);
        CHECK(first <= last);
        CHECK(last <= end);
        if (first < end) CHECK(first % w == 0);  // else the head is all of it: first == last == end
        CHECK((last % w == 0 || last == end));
        CHECK(first - begin < w);
        CHECK(end - last < w);
        CHECK(((last - first) > 0 || end - begin < 2 * w));  // a range of two vectors holds one whole
      }
}

namespace {
struct sgd_case {
  const char* name;
  strata::sgd opt;
  double dampening;  // the decimal opt.dampening was written as
  long step;
};

void sgd_reference(std::vector<float>& p, const std::vector<float>& g0, std::vector<float>& buf, const strata::sgd& o,
                   double dampening, float lr, float gs, bool decay, long t) {
  const float wd = decay ? o.weight_decay : 0.0f;
  const float omd = float(1.0 - dampening);  // the decimal, as torch
  for (std::size_t i = 0; i < p.size(); ++i) {
    float d = g0[i] * gs;
    if (wd != 0.0f) d = d + wd * p[i];
    if (o.momentum != 0.0f) {
      buf[i] = t == 1 ? d : o.momentum * buf[i] + omd * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] = p[i] - lr * d;
  }
}
}  // namespace

TEST_CASE("sgd: host driver == scalar reference, bitwise (plain, momentum, dampening, nesterov, decay)") {
  omp_set_num_threads(2);
  const sgd_case cases[] = {
      {"plain", {}, 0.0, 1},
      {"weight decay", {.weight_decay = 0.01f}, 0.0, 1},
      {"momentum, first step", {.momentum = 0.9f}, 0.0, 1},
      {"momentum, later step", {.momentum = 0.9f, .dampening = 0.1f, .weight_decay = 0.01f}, 0.1, 5},
      {"nesterov", {.momentum = 0.8f, .nesterov = true, .weight_decay = 0.02f}, 0.0, 3},
  };
  for (const auto& c : cases)
    for (bool decay : {true, false}) {
      std::vector<float> p = values(n_big, 5, -1.0f, 1.0f), g = grads(n_big, 6), buf = values(n_big, 7, -0.1f, 0.1f);
      std::vector<float> rp = p, rbuf = buf;
      sgd_reference(rp, g, rbuf, c.opt, c.dampening, 0.05f, 0.25f, decay, c.step);
      c.opt.step(strata::shard_args<float, float>{p.data(), g.data(), buf.data(), nullptr, nullptr, n_big}, 0.05f,
                 0.25f, decay, c.step);
      INFO(c.name << " decay " << decay);
      CHECK(same_bits(p, rp));
      CHECK(same_bits(buf, rbuf));
    }
}

TEST_CASE("lion: host driver == scalar reference, bitwise") {
  omp_set_num_threads(2);
  const strata::lion o{.beta1 = 0.9f, .beta2 = 0.99f, .weight_decay = 0.1f};
  for (bool decay : {true, false}) {
    std::vector<float> p = values(n_big, 8, -1.0f, 1.0f), g = grads(n_big, 9), m = values(n_big, 10, -0.01f, 0.01f);
    std::vector<float> rp = p, rm = m;
    const float dec = float(1.0 - 1e-4 * (decay ? 0.1 : 0.0));  // decimals, as torch
    for (std::size_t i = 0; i < n_big; ++i) {
      const float gi = g[i] * 2.0f;
      const float c = 0.9f * rm[i] + float(1.0 - 0.9) * gi;
      const float u = c > 0 ? 1.0f : (c < 0 ? -1.0f : 0.0f);
      rp[i] = rp[i] * dec - 1e-4f * u;
      rm[i] = 0.99f * rm[i] + float(1.0 - 0.99) * gi;
    }
    o.step(strata::shard_args<float, float>{p.data(), g.data(), m.data(), nullptr, nullptr, n_big}, 1e-4f, 2.0f, decay,
           4);
    INFO("decay " << decay);
    CHECK(same_bits(p, rp));
    CHECK(same_bits(m, rm));
  }
}

namespace {
// Runs an optimizer on a mixed-precision shard (16-bit grads and param copy) and checks
// that the fp32 master matches the fp32 run on the same (widened) grads and that every
// 16-bit param is the nearest-even rounding of its master.
template <class P, class O>
void check_mixed(const O& o) {
  const std::size_t n = n_big;
  std::vector<float> g32 = grads(n, 11);
  std::vector<P> g16(n);
  for (std::size_t i = 0; i < n; ++i) g32[i] = float(g16[i] = P(g32[i]));  // grads representable in P
  std::vector<float> master = values(n, 12, -3.0f, 3.0f), s0(n), s1(n);
  std::vector<float> master32 = master, t0(n), t1(n);
  std::vector<P> out(n);
  for (long t = 1; t <= 3; ++t) {
    o.step(strata::shard_args<P, P>{master.data(), g16.data(), s0.data(), s1.data(), out.data(), n}, 1e-3f, 1.0f, true,
           t);
    o.step(strata::shard_args<float, float>{master32.data(), g32.data(), t0.data(), t1.data(), nullptr, n}, 1e-3f, 1.0f,
           true, t);
  }
  CHECK(same_bits(master, master32));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += out[i].bits != P(master[i]).bits;
  CHECK(wrong == 0);
}
}  // namespace

TEST_CASE("mixed precision: bf16/fp16 grads in, param copy == RNE(master) out") {
  omp_set_num_threads(2);
  SECTION("adamw bf16") { check_mixed<bf16>(strata::adamw{}); }
  SECTION("adamw fp16") { check_mixed<fp16>(strata::adamw{}); }
  SECTION("sgd bf16") { check_mixed<bf16>(strata::sgd{.momentum = 0.9f, .weight_decay = 1e-4f}); }
  SECTION("sgd fp16") { check_mixed<fp16>(strata::sgd{.momentum = 0.9f, .nesterov = true}); }
  SECTION("lion bf16") { check_mixed<bf16>(strata::lion{.weight_decay = 0.1f}); }
  SECTION("lion fp16") { check_mixed<fp16>(strata::lion{}); }
}

TEST_CASE("an fp32 param copy, when given, is the master itself") {
  std::vector<float> p = values(1000, 13, -1, 1), g = grads(1000, 14), m(1000), v(1000), out(1000, -7.0f);
  strata::adamw{}.step(strata::shard_args<float, float>{p.data(), g.data(), m.data(), v.data(), out.data(), 1000},
                       1e-3f, 1.0f, true, 1);
  CHECK(same_bits(out, p));
}
