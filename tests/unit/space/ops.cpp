// ops<host> against plain references: GEMMs in every transpose against a triple loop,
// batched GEMMs against single ones, row functors, column sums and means in their stated
// order (bitwise, for 1 and 2 threads), id checks, the scatter-add in token order, moves.
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "catch.hpp"
#include "strata/space/host_ops.hpp"
#include "strata/space/ops.hpp"

namespace {

using ops = strata::ops<strata::host>;
using strata::transpose;
const strata::executor<strata::host> exec{};

std::vector<float> randoms(std::size_t n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs f with OpenMP limited to `threads`, restoring the previous setting.
template <class F>
void with_threads(int threads, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  f();
  omp_set_num_threads(before);
}

// Element (i, j) of op(X) for a row-major X with leading dimension ld.
float at(const std::vector<float>& x, std::int64_t ld, transpose t, std::int64_t i, std::int64_t j) {
  return t == transpose::yes ? x[j * ld + i] : x[i * ld + j];
}

}  // namespace

TEST_CASE("gemm matches a triple loop in every transpose, and beta 0 never reads C") {
  const std::int64_t m = 7, n = 5, k = 9;
  for (const transpose ta : {transpose::no, transpose::yes})
    for (const transpose tb : {transpose::no, transpose::yes}) {
      INFO("ta " << int(ta) << " tb " << int(tb));
      const std::int64_t lda = ta == transpose::yes ? m : k, ldb = tb == transpose::yes ? k : n;
      const auto a = randoms(static_cast<std::size_t>(m * k), 1), b = randoms(static_cast<std::size_t>(k * n), 2);
      const auto c0 = randoms(static_cast<std::size_t>(m * n), 3);
      std::vector<float> c = c0, fresh(c0.size(), std::numeric_limits<float>::quiet_NaN());
      ops::gemm(exec, ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, 2.0f, c.data(), n);
      ops::gemm(exec, ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, fresh.data(), n);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double dot = 0.0;
          for (std::int64_t p = 0; p < k; ++p) dot += double(at(a, lda, ta, i, p)) * at(b, ldb, tb, p, j);
          CHECK(std::abs(c[i * n + j] - (0.5 * dot + 2.0 * c0[i * n + j])) <= 1e-5);
          CHECK(std::abs(fresh[i * n + j] - dot) <= 1e-5);  // NaN in C would show here
        }
    }
}

TEST_CASE("gemm refuses extents beyond CBLAS's int range instead of wrapping") {
  float x = 0.0f;
  CHECK_THROWS_AS(
      ops::gemm(exec, transpose::no, transpose::no, std::int64_t{1} << 31, 1, 1, 1.0f, &x, 1, &x, 1, 0.0f, &x, 1),
      strata::config_error);
}

TEST_CASE("gemm_strided_batched gives each matrix the bits of the same gemm alone") {
  const std::int64_t m = 6, n = 4, k = 5, batch = 3, sa = m * k + 3, sb = k * n + 1, sc = m * n + 2;
  const auto a = randoms(static_cast<std::size_t>(sa * batch), 4), b = randoms(static_cast<std::size_t>(sb * batch), 5);
  std::vector<float> c(static_cast<std::size_t>(sc * batch), 0.0f), single(static_cast<std::size_t>(m * n));
  ops::gemm_strided_batched(exec, transpose::no, transpose::yes, m, n, k, 1.0f, a.data(), k, sa, b.data(), k, sb, 0.0f,
                            c.data(), n, sc, batch);
  for (std::int64_t q = 0; q < batch; ++q) {
    ops::gemm(exec, transpose::no, transpose::yes, m, n, k, 1.0f, a.data() + q * sa, k, b.data() + q * sb, k, 0.0f,
              single.data(), n);
    CHECK(std::memcmp(single.data(), c.data() + q * sc, single.size() * sizeof(float)) == 0);
  }
}

namespace {
struct square_fn {
  const float* x;
  float* y;
  void operator()(std::int64_t i) const { y[i] = x[i] * x[i]; }
};

// Per row: its sum (double), max, a scaled copy, and how often once() ran.
struct row_stats_fn {
  const float* x;
  double* sums;
  float* maxes;
  float* scaled;
  int* once_calls;
  std::int64_t cols;
  template <class Row>
  void operator()(const Row& row, std::int64_t r) const {
    const float* xr = x + r * cols;
    const double s = row.sum(cols, [&](std::int64_t j) { return static_cast<double>(xr[j]); });
    const float m = row.max(cols, [&](std::int64_t j) { return xr[j]; });
    row.for_each(cols, [&](std::int64_t j) { scaled[r * cols + j] = xr[j] / m; });
    row.once([&] {
      sums[r] = s;
      maxes[r] = m;
      ++once_calls[r];
    });
  }
};

struct product_term {
  const float* a;
  const float* b;
  std::int64_t cols;
  float operator()(std::int64_t i, std::int64_t j) const { return a[i * cols + j] * b[i * cols + j]; }
};
struct value_term {
  const double* v;
  double operator()(std::int64_t i) const { return v[i]; }
};
}  // namespace

TEST_CASE("map runs f once for every index") {
  for (const std::int64_t n : {std::int64_t{0}, std::int64_t{5}, std::int64_t{1} << 16}) {
    const auto x = randoms(static_cast<std::size_t>(n), 6);
    std::vector<float> y(static_cast<std::size_t>(n), -1.0f);
    ops::map(exec, n, square_fn{x.data(), y.data()});
    for (std::int64_t i = 0; i < n; ++i) REQUIRE(y[i] == x[i] * x[i]);
  }
}

TEST_CASE("rows: each row's sum, max, passes and once; the same bits for 1 and 2 threads") {
  const std::int64_t rows = 300, cols = 257;  // enough work for the threaded path
  const auto x = randoms(static_cast<std::size_t>(rows * cols), 7, 0.5f, 2.0f);
  const auto run = [&](int threads) {
    std::vector<double> sums(rows);
    std::vector<float> maxes(rows), scaled(x.size());
    std::vector<int> once(rows, 0);
    with_threads(threads, [&] {
      ops::rows(exec, rows, cols, row_stats_fn{x.data(), sums.data(), maxes.data(), scaled.data(), once.data(), cols});
    });
    for (std::int64_t r = 0; r < rows; ++r) {
      double ref = 0.0;
      float top = x[r * cols];
      for (std::int64_t j = 0; j < cols; ++j) {
        ref += x[r * cols + j];
        top = std::max(top, x[r * cols + j]);
      }
      REQUIRE(once[r] == 1);
      REQUIRE(maxes[r] == top);
      REQUIRE(std::abs(sums[r] - ref) <= 1e-12 * std::abs(ref));
      for (std::int64_t j = 0; j < cols; ++j) REQUIRE(scaled[r * cols + j] == x[r * cols + j] / top);
    }
    return sums;
  };
  const auto one = run(1), two = run(2);
  CHECK(std::memcmp(one.data(), two.data(), one.size() * sizeof(double)) == 0);
}

TEST_CASE("add_column_sums adds each column's rows by chunks in order, in double, for any thread count") {
  // 513 rows: four full chunks of 128 and one of 1; 100 rows: one chunk; 130 columns:
  // two full 64-column blocks and a remainder.
  for (const std::int64_t rows : {513, 100}) {
    const std::int64_t cols = 130;
    auto a = randoms(static_cast<std::size_t>(rows * cols), 8), b = randoms(static_cast<std::size_t>(rows * cols), 9);
    const auto start = randoms(static_cast<std::size_t>(cols), 10);
    const std::int64_t chunk = strata::detail::column_chunk_rows;
    // Column 0 tells the orders apart: 1e17 ends the first chunk, -1e17 starts the second,
    // every other term is 1. By chunks the ones after -1e17 are lost in their chunk (128
    // in all); in row order they survive (255).
    for (std::int64_t i = 0; i < rows; ++i) {
      a[i * cols] = i == chunk - 1 ? 1e17f : i == chunk ? -1e17f : 1.0f;
      b[i * cols] = 1.0f;
    }
    std::vector<float> ref = start;
    for (std::int64_t j = 0; j < cols; ++j) {
      double total = 0.0, in_order = 0.0;
      for (std::int64_t i0 = 0; i0 < rows; i0 += chunk) {
        double part = 0.0;
        for (std::int64_t i = i0; i < std::min(rows, i0 + chunk); ++i) {
          part += static_cast<double>(a[i * cols + j] * b[i * cols + j]);
          in_order += static_cast<double>(a[i * cols + j] * b[i * cols + j]);
        }
        total += part;
      }
      if (j > 0) REQUIRE(std::abs(total - in_order) <= 1e-12 * std::max(1.0, std::abs(in_order)));
      if (j == 0 && rows > chunk) REQUIRE(total != in_order);
      ref[j] = static_cast<float>(ref[j] + total);
    }
    for (const int threads : {1, 2}) {
      INFO(rows << " rows, " << threads << " threads");
      std::vector<float> out = start;
      with_threads(threads,
                   [&] { ops::add_column_sums(exec, rows, cols, product_term{a.data(), b.data(), cols}, out.data()); });
      CHECK(same_bits(out, ref));
    }
  }
}

TEST_CASE("mean sums its terms in index order, in double; 0 for no terms") {
  std::vector<double> v{1e16, 1.0, -1e16, 3.0, 0.25};
  float out = -1.0f;
  ops::mean(exec, static_cast<std::int64_t>(v.size()), value_term{v.data()}, static_cast<double>(v.size()), &out);
  double s = 0.0;
  for (double t : v) s += t;  // in order: 1.0 is lost against 1e16
  CHECK(out == static_cast<float>(s / 5.0));
  ops::mean(exec, 0, value_term{v.data()}, 0.0, &out);
  CHECK(out == 0.0f);
}

TEST_CASE("check_ids finds the first value that is not an id, and its value") {
  int scratch = 0;  // unused on the host: the values are readable here
  const std::vector<float> good{0.0f, 3.0f, 9.0f, 1.0f};
  CHECK_FALSE(ops::check_ids(exec, 4, 10, good.data(), scratch));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float bad : {-1.0f, 10.0f, 2.5f, nan, std::numeric_limits<float>::infinity()}) {
    INFO("bad value " << bad);
    const std::vector<float> v{1.0f, 2.0f, bad, 11.0f};
    const auto c = ops::check_ids(exec, 4, 10, v.data(), scratch);
    REQUIRE(c);
    CHECK(c.index == 2);
    CHECK((std::isnan(bad) ? std::isnan(c.value) : c.value == bad));
  }
}

TEST_CASE("scatter_add_rows adds in token order into the rows the table holds, for any thread count") {
  const std::int64_t n = 40, d = 150, lo = 3, local = 5;
  std::vector<float> ids(n);
  for (std::int64_t t = 0; t < n; ++t) ids[t] = static_cast<float>((t * 7) % 11);  // repeats, and ids outside
  const auto src = randoms(static_cast<std::size_t>(n * d), 11),
             start = randoms(static_cast<std::size_t>(local * d), 12);
  std::vector<float> ref = start;
  for (std::int64_t t = 0; t < n; ++t) {
    const std::int64_t r = static_cast<std::int64_t>(ids[t]) - lo;
    if (r < 0 || r >= local) continue;
    for (std::int64_t j = 0; j < d; ++j) ref[r * d + j] += src[t * d + j];
  }
  for (const int threads : {1, 2}) {
    std::vector<float> out = start;
    with_threads(threads, [&] { ops::scatter_add_rows(exec, n, d, lo, local, ids.data(), src.data(), out.data()); });
    CHECK(same_bits(out, ref));
  }
}

TEST_CASE("fill_zero, copy, broadcast_rows and add_into") {
  const auto a = randoms(12, 13), b = randoms(12, 14), row = randoms(4, 15);
  std::vector<float> z = a, c(12), bc(12), sum = a;
  ops::fill_zero(exec, z.data(), 12);
  ops::copy(exec, c.data(), b.data(), 12);
  ops::broadcast_rows(exec, 3, 4, row.data(), bc.data());
  ops::add_into(exec, 12, sum.data(), b.data());
  for (int i = 0; i < 12; ++i) {
    CHECK(z[i] == 0.0f);
    CHECK(c[i] == b[i]);
    CHECK(bc[i] == row[i % 4]);
    CHECK(sum[i] == a[i] + b[i]);
  }
}

namespace {
struct minimal_ctx {};  // a test's context: no space, no executor
}  // namespace

TEST_CASE("a context without space or executor computes on the host") {
  minimal_ctx ctx;
  static_assert(std::is_same_v<strata::space_of<minimal_ctx>, strata::host>);
  static_assert(std::is_same_v<decltype(strata::exec_of(ctx)), strata::executor<strata::host>>);
  static_assert(std::is_same_v<strata::ops_of<minimal_ctx>, ops>);
}
