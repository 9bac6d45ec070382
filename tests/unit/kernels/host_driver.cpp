// run_host visits every index exactly once, for sizes around its tile, SIMD and
// parallel thresholds, on the plain path and on the path split at a square root, and
// the packed roots are the correctly rounded ones.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/kernels/host_driver.hpp"

namespace k = strata::kernels;

namespace {
struct count_op {
  int* hits;
  void operator()(std::size_t i) const { hits[i] += 1; }
};

// A split functor: pre_sqrt hands out i^2 + 0.5 and post_sqrt records the root it gets.
struct split_op {
  int* hits;
  float* roots;
  float pre_sqrt(std::size_t i) const {
    hits[i] += 1;
    return static_cast<float>(i) * static_cast<float>(i) + 0.5f;
  }
  void post_sqrt(std::size_t i, float r) const {
    hits[i] += 10;
    roots[i] = r;
  }
  void operator()(std::size_t i) const { post_sqrt(i, std::sqrt(pre_sqrt(i))); }
};
static_assert(k::detail::split_at_sqrt<split_op>);
static_assert(!k::detail::split_at_sqrt<count_op>);
}  // namespace

TEST_CASE("run_host covers [0, n) exactly once") {
  const std::size_t sizes[] = {0,
                               1,
                               3,
                               15,
                               16,
                               17,
                               511,
                               512,
                               513,
                               k::detail::host_parallel_min - 1,
                               k::detail::host_parallel_min,
                               k::detail::host_parallel_min * 3 + 7};
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    for (std::size_t n : sizes) {
      std::vector<int> hits(n + 1, 0);
      k::run_host(n, count_op{hits.data()});
      std::vector<int> split_hits(n + 1, 0);
      std::vector<float> roots(n + 1, -1.0f);
      k::run_host(n, split_op{split_hits.data(), roots.data()});
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        bad += hits[i] != 1;
        bad += split_hits[i] != 11;
        bad += roots[i] != std::sqrt(static_cast<float>(i) * static_cast<float>(i) + 0.5f);
      }
      INFO("threads " << threads << " n " << n);
      CHECK(bad == 0);
      CHECK(hits[n] == 0);  // nothing past the end
      CHECK(split_hits[n] == 0);
    }
  }
}

TEST_CASE("sqrt_tile gives correctly rounded roots, as std::sqrt") {
  std::mt19937 gen(9);
  std::uniform_int_distribution<std::uint32_t> bits(0, 0x7f7fffffu);  // every finite non-negative float
  std::vector<float> x(100'003);
  for (auto& v : x) {
    const std::uint32_t b = bits(gen);
    std::memcpy(&v, &b, sizeof v);
  }
  x[0] = 0.0f, x[1] = INFINITY, x[2] = 1e-45f;
  std::vector<float> y = x;
  k::detail::sqrt_tile(y.data(), y.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) wrong += y[i] != std::sqrt(x[i]);
  CHECK(wrong == 0);
}

TEST_CASE("run_host inside a parallel region runs on the calling thread") {
  omp_set_num_threads(2);
  std::vector<int> a(100'000, 0), b(100'000, 0);
#pragma omp parallel num_threads(2)
  {
    std::vector<int>& mine = omp_get_thread_num() == 0 ? a : b;
    k::run_host(mine.size(), count_op{mine.data()});
  }
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += (a[i] != 1) + (b[i] != 1);
  CHECK(bad == 0);
}
