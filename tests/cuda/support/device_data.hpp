// Test data for device tests, and moving it between host vectors and device buffers.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <random>
#include <strata/space/cuda.hpp>
#include <vector>

namespace test {

// n floats drawn uniformly from [-4, 4) by a generator seeded with `seed`.
inline std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// The buffer's values once the work queued on `s` has run.
template <class T>
std::vector<T> to_host(const strata::cuda_buffer<T>& d, cudaStream_t s) {
  std::vector<T> h(d.size());
  strata::cuda::copy_async(h.data(), d.data(), d.bytes(), s);
  STRATA_CHECK_CUDA(cudaStreamSynchronize(s));
  return h;
}

template <class T>
strata::cuda_buffer<T> to_device(const std::vector<T>& h) {
  strata::cuda_buffer<T> d(h.size());
  strata::cuda::copy(d.data(), h.data(), d.bytes());
  return d;
}

}  // namespace test
