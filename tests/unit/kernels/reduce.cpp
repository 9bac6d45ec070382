// Host reductions are deterministic (bitwise the same sum for 1, 2 or 3 threads),
// accurate, and the finite check, scaling and casts do what they say for every element.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/kernels/reduce.hpp"

using strata::bf16;
using strata::fp16;
namespace k = strata::kernels;

namespace {
std::vector<float> randoms(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

template <class T>
std::vector<T> as(const std::vector<float>& v) {
  std::vector<T> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = T(v[i]);
  return r;
}

// Sum of squares in long double, sequentially: the accuracy reference.
template <class T>
long double exact_ish(const std::vector<T>& v) {
  long double s = 0;
  for (const T& x : v) s += static_cast<long double>(static_cast<float>(x)) * static_cast<float>(x);
  return s;
}

template <class T>
void check_sum_squares(std::size_t n) {
  const std::vector<T> x = as<T>(randoms(n, 7, 3.0f));
  std::vector<double> sums;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    sums.push_back(k::sum_squares(std::span<const T>(x)));
  }
  omp_set_num_threads(2);
  INFO("n " << n);
  CHECK(std::memcmp(&sums[0], &sums[1], sizeof(double)) == 0);
  CHECK(std::memcmp(&sums[0], &sums[2], sizeof(double)) == 0);
  // Double accumulation of exact squares: relative error well under 1e-12 for these n.
  const long double ref = exact_ish(x);
  CHECK(std::fabs(static_cast<long double>(sums[0]) - ref) <= 1e-12L * ref + 1e-300L);
}
}  // namespace

TEST_CASE("sum_squares is the same for any thread count, and accurate") {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{8191}, std::size_t{8193}, std::size_t{1'000'003},
                        std::size_t{5'000'011}}) {
    check_sum_squares<float>(n);
    check_sum_squares<bf16>(n);
    check_sum_squares<fp16>(n);
  }
}

TEST_CASE("sum_squares of a known vector") {
  std::vector<float> v(20000, 0.5f);
  CHECK(k::sum_squares(std::span<const float>(v)) == 5000.0);
  std::vector<float> w = {3.0f, 4.0f};
  CHECK(k::sum_squares(std::span<float>(w)) == 25.0);
}

template <class T>
void check_all_finite() {
  const std::size_t n = 100'003;
  std::vector<T> x = as<T>(randoms(n, 3));
  CHECK(k::all_finite(std::span<const T>(x)));
  for (std::size_t at : {std::size_t{0}, std::size_t{77'777}, n - 1})
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<T> y = x;
      y[at] = T(bad);
      INFO("position " << at << " value " << bad);
      CHECK_FALSE(k::all_finite(std::span<const T>(y)));
    }
  std::vector<T> big = {T(65504.0f)};  // the largest finite fp16 is finite
  CHECK(k::all_finite(std::span<const T>(big)));
}

TEST_CASE("all_finite finds one inf or NaN anywhere") {
  check_all_finite<float>();
  check_all_finite<bf16>();
  check_all_finite<fp16>();
}

TEST_CASE("scale multiplies every element") {
  std::vector<float> x = randoms(70'001, 4), y = x;
  k::scale(std::span<float>(x), 0.125f);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) wrong += x[i] != y[i] * 0.125f;
  CHECK(wrong == 0);
}

template <class P>
void check_cast() {
  const std::vector<float> x = randoms(100'001, 5, 10.0f);
  std::vector<P> h(x.size());
  k::cast(std::span<const float>(x), std::span<P>(h));
  std::vector<float> back(x.size());
  k::cast(std::span<P>(h), std::span<float>(back));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    wrong += h[i].bits != P(x[i]).bits;            // RNE, as core's conversion
    wrong += back[i] != static_cast<float>(h[i]);  // widening is exact
  }
  CHECK(wrong == 0);
  std::vector<P> short_out(3);
  CHECK_THROWS_AS(k::cast(std::span<const float>(x), std::span<P>(short_out)), strata::error);
}

TEST_CASE("cast fp32 <-> bf16 / fp16") {
  check_cast<bf16>();
  check_cast<fp16>();
}
