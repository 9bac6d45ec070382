// The CUDA reductions, scaling and casts against the host ones: sum of squares in double
// (within the reordering error of a double sum, and the same bits run to run), the finite
// check wherever the bad value sits, scaling and fp32 <-> bf16/fp16 casts bit for bit.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <strata/kernels/cuda_reduce.cuh>
#include <strata/kernels/reduce.hpp>
#include <strata/space/cuda.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"

namespace {

using strata::bf16;
using strata::fp16;

template <class T>
std::vector<T> to_host(const strata::cuda_buffer<T>& d) {
  std::vector<T> h(d.size());
  if (!h.empty()) strata::cuda::copy(h.data(), d.data(), d.bytes());
  return h;
}

template <class T>
strata::cuda_buffer<T> to_device(const std::vector<T>& h) {
  strata::cuda_buffer<T> d(h.size());
  if (!h.empty()) strata::cuda::copy(d.data(), h.data(), d.bytes());
  return d;
}

template <class T>
std::vector<T> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<T> v(n);
  for (auto& x : v) {
    if constexpr (std::is_same_v<T, float>)
      x = dist(gen);
    else
      x = T(dist(gen));
  }
  return v;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// Bit-identical, except that any NaN equals any NaN: arithmetic on a NaN keeps its
// payload on x86 but gives the one canonical NaN (0x7fffffff) on an NVIDIA GPU.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return false;
  return true;
}

template <class T>
T inf_of() {
  if constexpr (std::is_same_v<T, float>)
    return std::numeric_limits<float>::infinity();
  else
    return T(std::numeric_limits<float>::infinity());
}
template <class T>
T nan_of() {
  if constexpr (std::is_same_v<T, float>)
    return std::numeric_limits<float>::quiet_NaN();
  else
    return T(std::numeric_limits<float>::quiet_NaN());
}

const std::size_t sizes[] = {0, 1, 7, 1000, 65'537, 3'000'001};

template <class T>
void check_sum_squares() {
  strata::cuda_stream s;
  strata::kernels::cuda_reducer<T> r(3'000'001);
  for (std::size_t n : sizes) {
    INFO("n = " << n);
    const auto x = random_vector<T>(n, static_cast<unsigned>(n));
    const auto d = to_device(x);
    const std::span<const T> dx(d.data(), n);
    const double host = strata::kernels::sum_squares(std::span<const T>(x));
    const double dev = r.sum_squares(dx, s.get());
    // Both sum exact squares in double, in different orders: each partial sum rounds by
    // at most 2^-53 relative, so the two differ by at most about n * 2^-53 of the total.
    CHECK(std::abs(dev - host) <= static_cast<double>(n) * 0x1p-52 * host);
    // Run to run: the same bits (fixed partial-sum layout, no atomics).
    for (int k = 0; k < 3; ++k) {
      const double again = r.sum_squares(dx, s.get());
      CHECK(std::memcmp(&dev, &again, sizeof dev) == 0);
    }
  }
}

template <class T>
void check_all_finite() {
  strata::cuda_stream s;
  strata::kernels::cuda_reducer<T> r(3'000'001);
  for (std::size_t n : sizes) {
    INFO("n = " << n);
    auto x = random_vector<T>(n, 5);
    {
      const auto d = to_device(x);
      CHECK(r.all_finite(std::span<const T>(d.data(), n), s.get()));
    }
    if (n == 0) continue;
    for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      for (T bad : {inf_of<T>(), nan_of<T>()}) {
        auto y = x;
        y[at] = bad;
        const auto d = to_device(y);
        INFO("bad value at " << at);
        CHECK_FALSE(r.all_finite(std::span<const T>(d.data(), n), s.get()));
        CHECK_FALSE(strata::kernels::all_finite(std::span<const T>(y)));  // the host agrees
      }
    }
  }
}

}  // namespace

TEST_CASE("sum of squares: device within double rounding of the host, and reproducible") {
  SECTION("float") { check_sum_squares<float>(); }
  SECTION("bf16") { check_sum_squares<bf16>(); }
  SECTION("fp16") { check_sum_squares<fp16>(); }
}

TEST_CASE("finite check finds inf and NaN anywhere") {
  SECTION("float") { check_all_finite<float>(); }
  SECTION("bf16") { check_all_finite<bf16>(); }
  SECTION("fp16") { check_all_finite<fp16>(); }
}

TEST_CASE("the asynchronous forms write to device memory on the stream") {
  strata::cuda_stream s;
  strata::kernels::cuda_reducer<float> r(1000);
  const auto x = random_vector<float>(1000, 9);
  const auto d = to_device(x);
  strata::cuda_buffer<double> sum(1);
  strata::cuda_buffer<int> flag(1);
  r.sum_squares_async(std::span<const float>(d.data(), 1000), sum.data(), s.get());
  r.nonfinite_async(std::span<const float>(d.data(), 1000), flag.data(), s.get());
  s.synchronize();
  CHECK(to_host(flag)[0] == 0);
  CHECK(to_host(sum)[0] == Approx(strata::kernels::sum_squares(std::span<const float>(x))).epsilon(1e-12));
}

TEST_CASE("a reducer refuses more elements than it was sized for") {
  strata::cuda_stream s;
  strata::kernels::cuda_reducer<float> r(10);
  strata::cuda_buffer<float> d(11);
  CHECK_THROWS_AS(r.sum_squares(std::span<const float>(d.data(), 11), s.get()), strata::error);
}

TEST_CASE("scaling and casts give the host's bits") {
  strata::cuda_stream s;
  const std::size_t n = 1'000'003;
  auto x = random_vector<float>(n, 21);
  // Values around the 16-bit types' edges: halfway cases, overflow, subnormals, NaN.
  const float edges[] = {65504.0f,
                         65520.0f,
                         1e5f,
                         3e-8f,
                         6e-5f,
                         1.00390625f,
                         -2.0078125f,
                         1e-40f,
                         std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
  for (std::size_t i = 0; i < std::size(edges); ++i) x[i * 1000] = edges[i];

  SECTION("scale") {
    auto d = to_device(x);
    strata::kernels::scale_cuda(d.span(), 0.37f, s.get());
    s.synchronize();
    strata::kernels::scale(std::span<float>(x), 0.37f);
    CHECK(same_values(to_host(d), x));
  }
  SECTION("fp32 -> bf16 -> fp32") {
    const auto d = to_device(x);
    strata::cuda_buffer<bf16> d16(n);
    strata::cuda_buffer<float> back(n);
    strata::kernels::cast_cuda(std::span<const float>(d.data(), n), d16.span(), s.get());
    strata::kernels::cast_cuda(std::span<const bf16>(d16.data(), n), back.span(), s.get());
    s.synchronize();
    std::vector<bf16> h16(n);
    std::vector<float> hback(n);
    strata::kernels::cast(std::span<const float>(x), std::span<bf16>(h16));
    strata::kernels::cast(std::span<const bf16>(h16), std::span<float>(hback));
    CHECK(same_bits(to_host(d16), h16));
    CHECK(same_bits(to_host(back), hback));
  }
  SECTION("fp32 -> fp16 -> fp32") {
    const auto d = to_device(x);
    strata::cuda_buffer<fp16> d16(n);
    strata::cuda_buffer<float> back(n);
    strata::kernels::cast_cuda(std::span<const float>(d.data(), n), d16.span(), s.get());
    strata::kernels::cast_cuda(std::span<const fp16>(d16.data(), n), back.span(), s.get());
    s.synchronize();
    std::vector<fp16> h16(n);
    std::vector<float> hback(n);
    strata::kernels::cast(std::span<const float>(x), std::span<fp16>(h16));
    strata::kernels::cast(std::span<const fp16>(h16), std::span<float>(hback));
    CHECK(same_bits(to_host(d16), h16));
    CHECK(same_bits(to_host(back), hback));
  }
  SECTION("size mismatch") {
    strata::cuda_buffer<float> a(10);
    strata::cuda_buffer<bf16> b(11);
    CHECK_THROWS_AS(strata::kernels::cast_cuda(std::span<const float>(a.data(), 10), b.span(), s.get()), strata::error);
  }
}
