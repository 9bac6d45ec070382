// Stochastic rounding of the 16-bit param copy: always one of the two neighbours,
// unbiased on average, a pure function of (seed, step, global index) so it does not
// depend on the shard layout or the thread count; nearest-even when not asked for.
#include <omp.h>

#include <cmath>
#include <vector>

#include "catch.hpp"
#include "strata/optim/sgd.hpp"
#include "strata/optim/shard.hpp"

using strata::bf16;
using strata::fp16;

namespace {

// SGD with lr = 0 leaves every master weight as it is, so the param copy is exactly the
// rounding of the given master values.
template <class P>
std::vector<P> round_copy(const std::vector<float>& master_in, std::uint64_t seed, long step, std::size_t offset,
                          std::size_t pieces = 1) {
  const std::size_t n = master_in.size();
  std::vector<float> master = master_in, g(n), buf(n);
  std::vector<P> out(n);
  strata::shard_args<P, float> a{master.data(), g.data(), buf.data(), nullptr, out.data(), n};
  a.rounding = strata::rounding::stochastic;
  a.seed = seed;
  a.global_offset = offset;
  std::vector<strata::decay_run> runs;
  for (std::size_t k = 0; k < pieces; ++k)
    strata::add_decay_run(runs, n * k / pieces, n * (k + 1) / pieces - n * k / pieces, k % 2);
  strata::step_runs(strata::sgd{}, a, std::span<const strata::decay_run>(runs), 0.0f, 1.0f, step);
  return out;
}

template <class P>
std::uint16_t bits(P x) {
  return x.bits;
}

// Values 30% of the way from one P to the next, in several binades and both signs.
template <class P>
std::vector<float> between(std::size_t n, float frac) {
  std::vector<float> v(n);
  const float bases[] = {1.0f, -3.0f, 0.0078125f, 1000.0f};
  for (std::size_t i = 0; i < n; ++i) {
    const P lo(bases[i % 4]);
    const P hi = P::from_bits(static_cast<std::uint16_t>(lo.bits + 1));
    v[i] = float(lo) + frac * (float(hi) - float(lo));
  }
  return v;
}

template <class P>
void check_stochastic() {
  const std::size_t n = 200'000;
  const float frac = 0.3f;
  const std::vector<float> v = between<P>(n, frac);
  omp_set_num_threads(2);
  const auto a = round_copy<P>(v, 42, 7, 1000);

  // Each result is one of the two neighbours, and the share rounded away from zero
  // matches the fraction: 0.3 +- 5 sigma (sigma = sqrt(0.3 * 0.7 / n) ~ 0.001).
  std::size_t up = 0, other = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const P lo(v[i] < 0 ? -std::fabs(float(P(v[i]))) : float(P(v[i])));  // RNE: nearer is the low side at 0.3
    const auto hi_bits = static_cast<std::uint16_t>(lo.bits + 1);
    if (bits(a[i]) == hi_bits)
      ++up;
    else if (bits(a[i]) != lo.bits)
      ++other;
  }
  CHECK(other == 0);
  const double share = double(up) / n;
  INFO("share rounded up " << share);
  CHECK(std::fabs(share - frac) < 5 * std::sqrt(frac * (1 - frac) / n));

  // Deterministic, and independent of thread count and of how the shard is cut.
  omp_set_num_threads(1);
  const auto b = round_copy<P>(v, 42, 7, 1000, 7);
  std::size_t diff = 0;
  for (std::size_t i = 0; i < n; ++i) diff += bits(a[i]) != bits(b[i]);
  CHECK(diff == 0);

  // The same element at another global index, step or seed draws other bits.
  const auto c = round_copy<P>(v, 42, 8, 1000);
  const auto d = round_copy<P>(v, 43, 7, 1000);
  const auto e = round_copy<P>(v, 42, 7, 1001);
  std::size_t dc = 0, dd = 0, de = 0;
  for (std::size_t i = 0; i < n; ++i) {
    dc += bits(a[i]) != bits(c[i]);
    dd += bits(a[i]) != bits(d[i]);
    de += bits(a[i]) != bits(e[i]);
  }
  // Two independent draws disagree with probability 2 * 0.3 * 0.7 = 0.42.
  CHECK(dc > n / 3);
  CHECK(dd > n / 3);
  CHECK(de > n / 3);
}

}  // namespace

TEST_CASE("stochastic rounding to bf16") { check_stochastic<bf16>(); }
TEST_CASE("stochastic rounding to fp16") { check_stochastic<fp16>(); }

TEST_CASE("stochastic fp16 rounding at the edges") {
  using strata::kernels::detail::float_to_fp16_stochastic;
  // Exactly representable values never move, whatever the noise.
  for (std::uint32_t noise : {0u, 0x80000000u, 0xffffffffu}) {
    CHECK(float_to_fp16_stochastic(1.5f, noise) == fp16(1.5f).bits);
    CHECK(float_to_fp16_stochastic(0.0f, noise) == 0);
    CHECK(float_to_fp16_stochastic(INFINITY, noise) == 0x7c00);
  }
  // Subnormals: between 0 and the smallest subnormal (2^-24).
  const float tiny = 0.25f * 5.9604644775390625e-8f;
  CHECK(float_to_fp16_stochastic(tiny, 0) == 0);            // noise 0 never rounds up
  CHECK(float_to_fp16_stochastic(tiny, 0xffffffffu) == 1);  // the top of the noise always does
  // Above the largest finite value: the neighbour is inf, chosen with probability 0.
  CHECK(float_to_fp16_stochastic(65510.0f, 0xffffffffu) == 0x7bff);
  CHECK(float_to_fp16_stochastic(-65510.0f, 0xffffffffu) == 0xfbff);
}

TEST_CASE("without stochastic rounding the copy is round-to-nearest-even") {
  const std::vector<float> v = between<bf16>(1000, 0.5f);  // ties: RNE picks the even one
  std::vector<float> master = v, g(v.size()), buf(v.size());
  std::vector<bf16> out(v.size());
  strata::sgd{}.step(
      strata::shard_args<bf16, float>{master.data(), g.data(), buf.data(), nullptr, out.data(), v.size()}, 0.0f, 1.0f,
      true, 1);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(out[i].bits == bf16(v[i]).bits);
}
