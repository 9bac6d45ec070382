// Deterministic device reductions (sum of squares in double, finite check) through CUB's
// two-phase temp-storage API, and device scaling and fp32 <-> bf16/fp16 casts.
#pragma once
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include <algorithm>
#include <cstddef>
#include <span>

#include "../core/buffer.hpp"
#include "../space/cuda.hpp"
#include "cuda_driver.cuh"
#include "reduce.hpp"

namespace strata::kernels {

namespace detail {

struct square_in_double {
  template <class T>
  __device__ double operator()(T x) const {
    const double v = widen(x);
    return v * v;  // exact: a float squared fits in a double's mantissa
  }
};

struct is_nonfinite {
  template <class T>
  __device__ int operator()(T x) const {
    return nonfinite(x) ? 1 : 0;
  }
};

struct max_int {
  __device__ int operator()(int a, int b) const { return a > b ? a : b; }
};

}  // namespace detail

// Reductions over device arrays of T (float, bf16 or fp16) of up to max_n elements. The
// workspace is sized once, at construction, so a reduction allocates nothing. CUB's
// reduction has a fixed partial-sum layout and no atomics: a sum is the same bits run to
// run on one GPU model (another architecture may tile it differently). Reductions on one
// reducer share its workspace: queue them on one stream, or use one reducer per stream.
template <class T>
requires detail::host_float<T>
class cuda_reducer {
 public:
  explicit cuda_reducer(std::size_t max_n) : max_n_(max_n) {
    temp_ = buffer<unsigned char, cuda>(std::max<std::size_t>(std::max(sum_bytes(max_n), flag_bytes(max_n)), 1));
  }

  std::size_t max_size() const noexcept { return max_n_; }

  // Queues sum(x[i]^2), computed in double, into *out (device memory) on `stream`.
  void sum_squares_async(std::span<const T> x, double* out, cudaStream_t stream) {
    std::size_t bytes = check(x.size(), sum_bytes(x.size()), "sum_squares");
    // CUB reports cudaPeekAtLastError after its launch: drop an error nobody read first.
    strata::detail::clear_stale_cuda_error();
    STRATA_CHECK_CUDA(cub::DeviceReduce::TransformReduce(temp_.data(), bytes, x.data(), out, x.size(),
                                                         ::cuda::std::plus<double>{}, detail::square_in_double{}, 0.0,
                                                         stream));
  }
  // Queues 1 into *out (device memory) when some x[i] is inf or NaN, else 0.
  void nonfinite_async(std::span<const T> x, int* out, cudaStream_t stream) {
    std::size_t bytes = check(x.size(), flag_bytes(x.size()), "all_finite");
    strata::detail::clear_stale_cuda_error();
    STRATA_CHECK_CUDA(cub::DeviceReduce::TransformReduce(temp_.data(), bytes, x.data(), out, x.size(),
                                                         detail::max_int{}, detail::is_nonfinite{}, 0, stream));
  }

  // Blocking forms: queue on `stream`, wait for it, return the value.
  double sum_squares(std::span<const T> x, cudaStream_t stream) {
    sum_squares_async(x, &results_.dev()->sum, stream);
    return results_.fetch(stream).sum;
  }
  bool all_finite(std::span<const T> x, cudaStream_t stream) {
    nonfinite_async(x, &results_.dev()->flag, stream);
    return results_.fetch(stream).flag == 0;
  }

 private:
  struct result {
    double sum = 0;
    int flag = 0;
  };
  // A device slot for the blocking forms and its pinned host mirror.
  struct result_slots {
    buffer<result, cuda> d{1};
    buffer<result, pinned> h{1};
    result* dev() { return d.data(); }
    result fetch(cudaStream_t stream) {
      cuda::copy_async(h.data(), d.data(), sizeof(result), stream);
      wait_stream(stream);
      return h[0];
    }
  };

  static std::size_t sum_bytes(std::size_t n) {
    std::size_t bytes = 0;
    STRATA_CHECK_CUDA(cub::DeviceReduce::TransformReduce(nullptr, bytes, static_cast<const T*>(nullptr),
                                                         static_cast<double*>(nullptr), n, ::cuda::std::plus<double>{},
                                                         detail::square_in_double{}, 0.0));
    return bytes;
  }
  static std::size_t flag_bytes(std::size_t n) {
    std::size_t bytes = 0;
    STRATA_CHECK_CUDA(cub::DeviceReduce::TransformReduce(nullptr, bytes, static_cast<const T*>(nullptr),
                                                         static_cast<int*>(nullptr), n, detail::max_int{},
                                                         detail::is_nonfinite{}, 0));
    return bytes;
  }
  std::size_t check(std::size_t n, std::size_t needed, const char* what) const {
    expects(n <= max_n_, [&] {
      return strata::cat("cuda_reducer::", what, ": ", n, " elements, but the reducer was sized for ", max_n_);
    });
    expects<cuda_error>(needed <= temp_.size(), [&] {
      return strata::cat("cuda_reducer::", what, ": CUB asks for ", needed, " bytes of workspace for ", n,
                         " elements, more than the ", temp_.size(), " sized for ", max_n_);
    });
    return temp_.size();
  }

  std::size_t max_n_;
  buffer<unsigned char, cuda> temp_;
  result_slots results_;
};

// x *= s on the device, elementwise, queued on `stream`.
inline void scale_cuda(std::span<float> x, float s, cudaStream_t stream) {
  run_cuda(x.size(), detail::scale_op{x.data(), s}, stream);
}

// fp32 -> bf16/fp16 on the device, round to nearest even (the host cast's functor).
template <class P>
requires detail::reduced_float<P>
void cast_cuda(std::span<const float> in, std::span<P> out, cudaStream_t stream) {
  expects(in.size() == out.size(),
          [&] { return strata::cat("cast_cuda: ", in.size(), " floats into ", out.size(), " elements"); });
  run_cuda(in.size(), detail::cast_op<float, P>{in.data(), out.data()}, stream);
}

// bf16/fp16 -> fp32 on the device (exact).
template <class P>
requires detail::reduced_float<P>
void cast_cuda(std::span<const P> in, std::span<float> out, cudaStream_t stream) {
  expects(in.size() == out.size(),
          [&] { return strata::cat("cast_cuda: ", in.size(), " elements into ", out.size(), " floats"); });
  run_cuda(in.size(), detail::cast_op<P, float>{in.data(), out.data()}, stream);
}

}  // namespace strata::kernels
