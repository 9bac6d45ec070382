// What the GPU tests of the nn layers (nn_layers.cu, nn_transformer.cu) share to run a
// layer in the CUDA space against the same layer on the host, on the same data: the
// stream and cuBLAS handle a trainer would give, random data, copies in and out of the
// device, bitwise and toleranced comparisons, and device storage for params.
#pragma once
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <deque>
#include <random>
#include <strata/model/param.hpp>
#include <strata/space/cuda.hpp>
#include <strata/space/detail/cublas_check.hpp>
#include <strata/space/tensor.hpp>
#include <strata/train/context.hpp>
#include <vector>

#include "catch.hpp"

namespace strata_test {

using strata::shape;
using host_ctx = strata::context<strata::host, strata::self_comm>;
using host_tensor = strata::tensor<float>;
using device_tensor = strata::tensor<float, strata::cuda>;

// The unit roundoff of float: every float operation is exact to within u relative.
inline constexpr double u = 0x1p-24;

// What a trainer gives the layers: a stream, a cuBLAS handle bound to it, in the default
// math mode (no TF32: the GEMMs are fp32 throughout, as on the host), and scratch.
class device_executor {
 public:
  device_executor() {
    STRATA_CHECK_CUBLAS(cublasCreate(&blas_));
    STRATA_CHECK_CUBLAS(cublasSetStream(blas_, stream_.get()));
    STRATA_CHECK_CUBLAS(cublasSetMathMode(blas_, strata::detail::cublas_math_mode));
  }
  device_executor(const device_executor&) = delete;
  device_executor& operator=(const device_executor&) = delete;
  // The stream's work ends before its scratch is freed (members go in reverse order).
  ~device_executor() {
    (void)cudaStreamSynchronize(stream_.get());
    (void)cublasDestroy(blas_);
  }

  strata::executor<strata::cuda> get() const { return {stream_.get(), blas_, &scratch_}; }
  // The layers queue on a non-blocking stream, which cuda::copy's legacy-stream wait does
  // not cover: wait for it before reading results.
  void synchronize() const { stream_.synchronize(); }

 private:
  strata::cuda_stream stream_;
  cublasHandle_t blas_ = nullptr;
  mutable strata::cuda_scratch scratch_;
};

inline std::vector<float> random_values(std::size_t n, std::mt19937& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline host_tensor host_of(const shape& s, const std::vector<float>& values) {
  host_tensor t(s);
  REQUIRE(values.size() == t.numel());
  std::copy(values.begin(), values.end(), t.data());
  return t;
}

inline device_tensor device_of(const shape& s, const std::vector<float>& values) {
  device_tensor t(s);
  REQUIRE(values.size() == t.numel());
  if (!values.empty()) strata::cuda::copy(t.data(), values.data(), values.size() * sizeof(float));
  return t;
}

template <class T>
std::vector<T> read(const T* device, std::size_t n) {
  std::vector<T> h(n);
  if (n != 0) strata::cuda::copy(h.data(), device, n * sizeof(T));
  return h;
}
template <class T>
std::vector<T> read(const strata::tensor<T, strata::cuda>& t) {
  return read(t.data(), t.numel());
}
template <class T>
std::vector<T> values_of(const strata::tensor<T>& t) {
  return {t.data(), t.data() + t.numel()};
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// |a - b| <= tol, with the index and both values in the failure message.
inline void require_close(const char* what, std::size_t i, double a, double b, double tol) {
  if (std::abs(a - b) <= tol) return;
  INFO(what << "[" << i << "]: device " << a << ", host " << b << ", tolerance " << tol);
  REQUIRE(std::abs(a - b) <= tol);
}

// Device storage for params: each param of a device layer gets the given values and
// starting gradients (a host param's), so both layers start from the same state.
struct device_params {
  std::deque<strata::cuda_buffer<float>> blocks;
  void bind(strata::param<float>& p, const std::vector<float>& values, const std::vector<float>& grads) {
    if (p.numel() == 0) {
      p.data_ptr = p.grad_ptr = nullptr;
      return;
    }
    auto& d = blocks.emplace_back(p.numel());
    auto& g = blocks.emplace_back(p.numel());
    strata::cuda::copy(d.data(), values.data(), d.bytes());
    strata::cuda::copy(g.data(), grads.data(), g.bytes());
    p.data_ptr = d.data();
    p.grad_ptr = g.data();
  }
};

}  // namespace strata_test
