// ops<cuda>: the CUDA space's operations (space/ops.hpp): cuBLAS GEMMs on the executor's
// stream, and kernels for maps, per-row functors and reductions, each in a fixed order.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <functional>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "cuda.hpp"
#include "cuda_id_checks.cuh"
#include "cuda_transfer.hpp"
#include "detail/cublas_check.hpp"
#include "detail/cublaslt_matmul.hpp"
#include "detail/cuda_launch.cuh"
#include "ops.hpp"
#include "tensor.hpp"

namespace strata {

namespace detail {

// The row max, compared as the host compares (x > m ? x : m).
struct max_op {
  __device__ float operator()(float a, float b) const { return b > a ? b : a; }
};

// The row of a rows functor on a GPU: a block of Block threads; thread t takes elements
// t, t + Block, ... in every pass, and sums and maxima go through CUB's fixed trees.
template <int Block>
struct cuda_row {
  using max_reduce = cub::BlockReduce<float, Block>;
  using sum_reduce = cub::BlockReduce<double, Block>;
  struct storage {
    union {
      typename max_reduce::TempStorage max;
      typename sum_reduce::TempStorage sum;
    } temp;
    float max;
    double sum;
  };
  storage* s;

  template <class G>
  __device__ void for_each(std::int64_t n, G&& g) const {
    for (std::int64_t j = threadIdx.x; j < n; j += Block) g(j);
  }
  template <class G>
  __device__ double sum(std::int64_t n, G&& g) const {
    double part = 0.0;
    for (std::int64_t j = threadIdx.x; j < n; j += Block) part += g(j);
    part = sum_reduce(s->temp.sum).Sum(part);
    if (threadIdx.x == 0) s->sum = part;
    __syncthreads();  // the sum is visible, and temp may be reused
    const double total = s->sum;
    __syncthreads();  // every thread has read it before a later pass overwrites it
    return total;
  }
  template <class G>
  __device__ float max(std::int64_t n, G&& g) const {
    float m = g(0);
    for (std::int64_t j = threadIdx.x; j < n; j += Block) {
      const float v = g(j);
      m = v > m ? v : m;
    }
    m = max_reduce(s->temp.max).Reduce(m, max_op{});
    if (threadIdx.x == 0) s->max = m;
    __syncthreads();
    const float top = s->max;
    __syncthreads();
    return top;
  }
  template <class G>
  __device__ void once(G&& g) const {
    if (threadIdx.x == 0) g();
  }
  __device__ void sync() const { __syncthreads(); }
};

template <class F>
__global__ void __launch_bounds__(cuda_ops_block) map_kernel(std::int64_t n, F f) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) f(i);
}

template <int Block, class F>
__global__ void __launch_bounds__(Block) rows_kernel(std::int64_t rows, F f) {
  __shared__ typename cuda_row<Block>::storage shared;
  const cuda_row<Block> row{&shared};
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    f(row, r);
    __syncthreads();  // before the next row reuses the shared storage
  }
}

// add_column_sums in ops.hpp's order, with no float atomics: one thread per (chunk,
// column) sums the chunk's rows in order, in double, into partial[chunk, col], which the
// second kernel adds up in chunk order (one chunk goes straight to out: the same sum).
template <class Term>
__global__ void __launch_bounds__(cuda_ops_block)
    column_chunk_sums_kernel(std::int64_t rows, std::int64_t cols, Term term, double* partial, float* out) {
  const std::int64_t chunks = column_chunks(rows);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t c = blockIdx.y; c < chunks; c += gridDim.y) {
    const std::int64_t i0 = c * column_chunk_rows, i1 = i0 + column_chunk_rows < rows ? i0 + column_chunk_rows : rows;
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols; j += stride) {
      double acc = 0.0;
      for (std::int64_t i = i0; i < i1; ++i) acc += static_cast<double>(term(i, j));
      if (partial)
        partial[c * cols + j] = acc;
      else
        out[j] = static_cast<float>(out[j] + acc);
    }
  }
}

template <int Block>
__global__ void __launch_bounds__(Block)
    add_column_chunks_kernel(std::int64_t chunks, std::int64_t cols, const double* partial, float* out) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < cols; j += stride) {
    double acc = 0.0;
    for (std::int64_t c = 0; c < chunks; ++c) acc += partial[c * cols + j];
    out[j] = static_cast<float>(out[j] + acc);
  }
}

// mean's order: up to mean_chunk terms are one block's (each thread a fixed stride, CUB
// a fixed tree); more are cut into chunks of mean_chunk, one block each, whose sums a
// last block adds the same way. The order depends on n only, never on the GPU.
inline constexpr std::int64_t mean_chunk = 16 * 1024;

template <class Term>
__device__ double block_sum(std::int64_t lo, std::int64_t hi, const Term& term) {
  using reduce = cub::BlockReduce<double, cuda_ops_block>;
  __shared__ typename reduce::TempStorage temp;
  double s = 0.0;
  for (std::int64_t i = lo + threadIdx.x; i < hi; i += cuda_ops_block) s += term(i);
  s = reduce(temp).Sum(s);
  __syncthreads();  // temp may be reused by the block's next sum
  return s;
}

// *out = the sum over [0, n) / count, or partial[c] = chunk c's sum where partial is set.
template <class Term>
__global__ void __launch_bounds__(cuda_ops_block)
    mean_kernel(std::int64_t n, Term term, double count, float* out, double* partial) {
  if (partial) {
    for (std::int64_t c = blockIdx.x; c * mean_chunk < n; c += gridDim.x) {
      const std::int64_t lo = c * mean_chunk, hi = lo + mean_chunk < n ? lo + mean_chunk : n;
      const double s = block_sum(lo, hi, term);
      if (threadIdx.x == 0) partial[c] = s;
    }
    return;
  }
  const double s = block_sum(0, n, term);
  if (threadIdx.x == 0) *out = count != 0.0 ? static_cast<float>(s / count) : 0.0f;
}

struct partial_term {
  const double* partial;
  __device__ double operator()(std::int64_t i) const { return partial[i]; }
};

// scatter_add_rows by sorted rows. First each token's key: its row of the table, or
// `local` (sorted last, skipped) for an id the table does not hold.
template <int Block>
__global__ void __launch_bounds__(Block) scatter_keys_kernel(std::int64_t n, std::int64_t lo, std::int64_t local,
                                                             const float* ids, unsigned* keys, unsigned* tokens) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Block;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * Block + threadIdx.x; t < n; t += stride) {
    const std::int64_t row = static_cast<std::int64_t>(ids[t]) - lo;
    keys[t] = static_cast<unsigned>(row >= 0 && row < local ? row : local);
    tokens[t] = static_cast<unsigned>(t);
  }
}

// Then, after a stable sort of (key, token), the block at the first position of each
// row's run adds that run's source rows into the row, column j by thread j, in token
// order: the host's float sum for every element, with no atomics and no rescans.
template <int Block, class S>
__global__ void __launch_bounds__(Block)
    scatter_runs_kernel(std::int64_t n, std::int64_t d, std::int64_t local, const unsigned* keys,
                        const unsigned* tokens, const S* src, float* out) {
  for (std::int64_t s = blockIdx.x; s < n; s += gridDim.x) {
    const unsigned row = keys[s];
    if (row >= local || (s > 0 && keys[s - 1] == row)) continue;
    float* o = out + static_cast<std::int64_t>(row) * d;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) {
      float acc = o[j];
      for (std::int64_t u = s; u < n && keys[u] == row; ++u)
        acc += static_cast<float>(src[static_cast<std::int64_t>(tokens[u]) * d + j]);
      o[j] = acc;
    }
  }
}

// Bytes rounded up to what cudaMalloc aligns to, for several arrays in one scratch.
inline std::size_t cuda_aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class R, class T>
struct broadcast_rows_fn {
  const R* row;
  T* out;
  std::int64_t cols;
  __device__ void operator()(std::int64_t i) const { out[i] = round_to<T>(static_cast<float>(row[i % cols])); }
};
// a += b, in float (a 16-bit a rounds its sum once).
template <class T>
struct add_into_fn {
  T* a;
  const T* b;
  __device__ void operator()(std::int64_t i) const {
    a[i] = round_to<T>(static_cast<float>(a[i]) + static_cast<float>(b[i]));
  }
};

// The 16-bit types cuBLAS multiplies on tensor cores.
template <class T>
inline constexpr bool is_half = std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;
template <class T>
inline constexpr cudaDataType_t cuda_data_type =
    is_half<T> ? (std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_16F) : CUDA_R_32F;

// cuBLAS takes int extents: refuse what would silently wrap (the message is built only
// on failure).
inline void require_int_extents(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t lda, std::int64_t ldb,
                                std::int64_t ldc, std::int64_t batch = 1) {
  const auto fits = [](std::int64_t v) { return v >= 0 && v <= INT_MAX; };
  expects<config_error>(fits(m) && fits(n) && fits(k) && fits(lda) && fits(ldb) && fits(ldc) && fits(batch), [&] {
    return cat("gemm: extents m=", m, " n=", n, " k=", k, " (batch ", batch, ") exceed the 32-bit range of cuBLAS");
  });
}
// cuBLAS rejects leading dimensions below 1 even when k == 0 and nothing is read.
inline int cublas_ld(std::int64_t v) { return static_cast<int>(v < 1 ? 1 : v); }
inline cublasOperation_t cublas_op(transpose t) { return t == transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N; }

// A GEMM operand as stored (rows x cols at leading dimension ld, batch matrices stride
// apart), rounded to T (RNE) and packed: out[q, r, c], leading dimension cols.
template <class T, class In = float>
struct pack_operand_fn {
  const In* in;
  T* out;
  std::int64_t rows, cols, ld, stride;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t per = rows * cols, q = i / per, rc = i - q * per, r = rc / cols;
    out[i] = T(static_cast<float>(in[q * stride + r * ld + (rc - r * cols)]));
  }
};

}  // namespace detail

template <>
struct ops<cuda> {
  using exec_type = executor<cuda>;
  // One launch for many small GEMMs is what keeps a GPU busy: layers batch them.
  static constexpr bool prefers_batched = true;

  // On exec.stream through exec.blas (whose pointer mode must be host, cuBLAS's default).
  // cuBLAS is column-major, where a row-major matrix reads as its transpose: C^T =
  // op(B)^T op(A)^T is the same call with A and B (and m and n) swapped.
  // A, B and C are float or 16-bit (bf16 or fp16, one type per call). With a 16-bit
  // operand, or 16-bit operands asked for (exec.gemm), cuBLAS multiplies on tensor cores
  // and accumulates in fp32: a 16-bit operand is read where it lives, a float one is
  // rounded into the executor's scratch first; C is written as its type. All float with
  // exec.gemm fp32 is cublasSgemm (no TF32: the host's numbers).
  template <class A, class B, class C>
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const A* a, std::int64_t lda, const B* b, std::int64_t ldb, float beta, C* c,
                   std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    detail::require_int_extents(m, n, k, lda, ldb, ldc);
    if constexpr (all_float<A, B, C>) {
      if (exec.gemm == gemm_operands::fp32) {
        STRATA_CHECK_CUBLAS(cublasSgemm(exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n),
                                        static_cast<int>(m), static_cast<int>(k), &alpha, b, detail::cublas_ld(ldb), a,
                                        detail::cublas_ld(lda), &beta, c, detail::cublas_ld(ldc)));
        return;
      }
    }
    gemm_16bit(exec, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }

  template <class A, class B, class C>
  static void gemm_strided_batched(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                   std::int64_t k, float alpha, const A* a, std::int64_t lda, std::int64_t stride_a,
                                   const B* b, std::int64_t ldb, std::int64_t stride_b, float beta, C* c,
                                   std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    detail::require_int_extents(m, n, k, lda, ldb, ldc, batch);
    if constexpr (all_float<A, B, C>) {
      if (exec.gemm == gemm_operands::fp32) {
        STRATA_CHECK_CUBLAS(cublasSgemmStridedBatched(
            exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n), static_cast<int>(m),
            static_cast<int>(k), &alpha, b, detail::cublas_ld(ldb), static_cast<long long>(stride_b), a,
            detail::cublas_ld(lda), static_cast<long long>(stride_a), &beta, c, detail::cublas_ld(ldc),
            static_cast<long long>(stride_c), static_cast<int>(batch)));
        return;
      }
    }
    gemm_16bit(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
  }

  // One cuBLASLt matmul with the epilogue (detail/cublaslt_matmul.hpp), on operands read
  // where they are: all of one 16-bit type, or all float with fp32 GEMMs (no TF32), as
  // gemm multiplies them. In fp32 only the bias: cuBLASLt's fp32 GELU takes the GPU's
  // approximate tanh (some 1e-4 relative), which would move an fp32 run off the host's
  // numbers, where in 16 bits it is far below one rounding (2^-9). GELU's auxiliary
  // matrix needs a leading dimension divisible by 8 (cuBLASLt's rule). Anything else, or
  // a call cuBLASLt has no kernel for: false.
  template <class A, class B, class C, class W>
  static bool gemm_fused(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                         std::int64_t k, const A* a, std::int64_t lda, const B* b, std::int64_t ldb, C* c,
                         std::int64_t ldc, const gemm_epilogue<W, C>& e) {
    constexpr bool half = detail::is_half<C> && std::is_same_v<A, C> && std::is_same_v<B, C>;
    if constexpr (!half && !all_float<A, B, C>) {
      return false;
    } else {
      if (!half && (exec.gemm != gemm_operands::fp32 || e.kind != epilogue::bias)) return false;
      if (m == 0 || n == 0 || k == 0 || (e.kind != epilogue::bias && ldc % 8 != 0)) return false;
      expects(e.kind == epilogue::dgelu ? e.aux_in != nullptr
                                        : e.bias != nullptr && (e.kind == epilogue::bias || e.aux_out != nullptr),
              "gemm_fused: the epilogue lacks its bias or its auxiliary matrix");
      detail::require_int_extents(m, n, k, lda, ldb, ldc);
      // Column-major, as in gemm: C^T = op(B)^T op(A)^T, so A and B (and m and n) swap, and
      // a bias over C's columns is one over the rows of cuBLAS's D.
      detail::lt_matmul_call call;
      call.op_a = detail::cublas_op(tb);
      call.op_b = detail::cublas_op(ta);
      call.m = n;
      call.n = m;
      call.k = k;
      call.ab_type = call.c_type = detail::cuda_data_type<C>;
      call.a = b;
      call.lda = detail::cublas_ld(ldb);
      call.b = a;
      call.ldb = detail::cublas_ld(lda);
      call.c = c;
      call.ldc = detail::cublas_ld(ldc);
      switch (e.kind) {
        case epilogue::bias: call.epilogue = CUBLASLT_EPILOGUE_BIAS; break;
        case epilogue::gelu_bias:
          call.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
          call.aux = e.aux_out;
          break;
        case epilogue::dgelu:
          call.epilogue = CUBLASLT_EPILOGUE_DGELU;
          call.aux = e.aux_in;
          break;
      }
      if (e.kind != epilogue::dgelu) {
        call.bias = e.bias;
        call.bias_type = detail::cuda_data_type<W>;
      }
      return detail::lt_matmul(call, exec.stream);
    }
  }

  template <class F>
  static void map(const exec_type& exec, std::int64_t n, const F& f) {
    if (n <= 0) return;
    strata::detail::clear_stale_cuda_error();
    detail::map_kernel<<<detail::cuda_blocks_for_threads(n), detail::cuda_ops_block, 0, exec.stream>>>(n, f);
    detail::check_ops_launch();
  }

  template <class F>
  static void rows(const exec_type& exec, std::int64_t rows, std::int64_t, const F& f) {
    if (rows <= 0) return;
    strata::detail::clear_stale_cuda_error();
    detail::rows_kernel<detail::cuda_ops_block>
        <<<detail::cuda_blocks_for(rows), detail::cuda_ops_block, 0, exec.stream>>>(rows, f);
    detail::check_ops_launch();
  }

  // The partial sums live in the executor's scratch, or (an executor without one) in
  // memory allocated and freed in stream order for this call.
  template <class Term>
  static void add_column_sums(const exec_type& exec, std::int64_t rows, std::int64_t cols, const Term& term,
                              float* out) {
    if (rows <= 0 || cols <= 0) return;
    const std::int64_t chunks = detail::column_chunks(rows);
    const std::size_t bytes = chunks > 1 ? static_cast<std::size_t>(chunks * cols) * sizeof(double) : 0;
    cuda_scratch own;
    double* partial =
        bytes ? static_cast<double*>((exec.scratch ? *exec.scratch : own).get(bytes, exec.stream)) : nullptr;
    const dim3 grid(detail::cuda_blocks_for_threads(cols),
                    static_cast<unsigned>(std::min<std::int64_t>(chunks, detail::cuda_max_grid_y)));
    strata::detail::clear_stale_cuda_error();
    detail::column_chunk_sums_kernel<<<grid, detail::cuda_ops_block, 0, exec.stream>>>(rows, cols, term, partial, out);
    detail::check_ops_launch();
    if (partial) {
      detail::add_column_chunks_kernel<detail::cuda_ops_block>
          <<<detail::cuda_blocks_for_threads(cols), detail::cuda_ops_block, 0, exec.stream>>>(chunks, cols, partial,
                                                                                              out);
      detail::check_ops_launch();
    }
    own.release(exec.stream);
  }

  // Chunk sums (more than one chunk) live in the executor's scratch, or in memory of this
  // call's own.
  template <class Term>
  static void mean(const exec_type& exec, std::int64_t n, const Term& term, double count, float* out) {
    strata::detail::clear_stale_cuda_error();
    const std::int64_t chunks = (std::max<std::int64_t>(n, 0) + detail::mean_chunk - 1) / detail::mean_chunk;
    if (chunks <= 1) {
      detail::mean_kernel<<<1, detail::cuda_ops_block, 0, exec.stream>>>(n, term, count, out, nullptr);
      detail::check_ops_launch();
      return;
    }
    cuda_scratch own;
    auto* partial = static_cast<double*>(
        (exec.scratch ? *exec.scratch : own).get(static_cast<std::size_t>(chunks) * sizeof(double), exec.stream));
    detail::mean_kernel<<<detail::cuda_blocks_for(chunks), detail::cuda_ops_block, 0, exec.stream>>>(n, term, count,
                                                                                                     out, partial);
    detail::check_ops_launch();
    detail::mean_kernel<<<1, detail::cuda_ops_block, 0, exec.stream>>>(chunks, detail::partial_term{partial}, count,
                                                                       out, nullptr);
    detail::check_ops_launch();
    own.release(exec.stream);
  }

  // Flags the first bad position on the device, then waits for the stream (through
  // wait_stream: not a hang if a peer failed) and reads it, and its value, back.
  static id_check check_ids(const exec_type& exec, std::int64_t n, std::int64_t limit, const float* values,
                            tensor<unsigned long long, cuda>& scratch, bool labels = false) {
    scratch.resize(detail::vector_shape(1));
    unsigned long long* first = scratch.data();
    detail::queue_id_check(exec.stream, n, limit, values, labels, first);
    unsigned long long found = 0;
    strata::download(exec.stream, &found, first, sizeof found);
    id_check check;
    if (found < static_cast<unsigned long long>(n)) [[unlikely]] {
      check.index = static_cast<std::int64_t>(found);
      strata::download(exec.stream, &check.value, values + check.index, sizeof check.value);
    }
    return check;
  }

  // Keys and token indices, sorted by CUB's stable radix sort over the bits `local` needs,
  // in the executor's scratch (or stream-ordered memory of this call's own).
  template <class S>
  static void scatter_add_rows(const exec_type& exec, std::int64_t n, std::int64_t d, std::int64_t lo,
                               std::int64_t local, const float* ids, const S* src, float* out) {
    if (n == 0 || d == 0 || local == 0) return;
    // CUB sorts an int count; keys (rows, and `local` for the skipped) are 32-bit.
    expects(n <= std::int64_t{INT_MAX} && local < std::int64_t{UINT_MAX}, [&] {
      return strata::cat("scatter_add_rows: ", n, " tokens into ", local,
                         " rows; at most 2^31 - 1 tokens and 2^32 - 2 rows");
    });
    const auto count = static_cast<int>(n);
    int end_bit = 1;
    while (end_bit < 32 && (std::int64_t{1} << end_bit) <= local) ++end_bit;  // keys go up to `local`
    std::size_t sort_bytes = 0;
    STRATA_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(
        nullptr, sort_bytes, static_cast<const unsigned*>(nullptr), static_cast<unsigned*>(nullptr),
        static_cast<const unsigned*>(nullptr), static_cast<unsigned*>(nullptr), count, 0, end_bit, exec.stream));
    const std::size_t array = detail::cuda_aligned(static_cast<std::size_t>(n) * sizeof(unsigned));
    cuda_scratch own;
    auto* base = static_cast<char*>((exec.scratch ? *exec.scratch : own).get(4 * array + sort_bytes, exec.stream));
    auto* keys = reinterpret_cast<unsigned*>(base);
    auto* tokens = reinterpret_cast<unsigned*>(base + array);
    auto* sorted_keys = reinterpret_cast<unsigned*>(base + 2 * array);
    auto* sorted_tokens = reinterpret_cast<unsigned*>(base + 3 * array);
    strata::detail::clear_stale_cuda_error();
    detail::scatter_keys_kernel<detail::cuda_ops_block>
        <<<detail::cuda_blocks_for_threads(n), detail::cuda_ops_block, 0, exec.stream>>>(n, lo, local, ids, keys,
                                                                                         tokens);
    detail::check_ops_launch();
    STRATA_CHECK_CUDA(cub::DeviceRadixSort::SortPairs(base + 4 * array, sort_bytes, keys, sorted_keys, tokens,
                                                      sorted_tokens, count, 0, end_bit, exec.stream));
    detail::scatter_runs_kernel<detail::cuda_ops_block>
        <<<detail::cuda_blocks_for(n), detail::cuda_ops_block, 0, exec.stream>>>(n, d, local, sorted_keys,
                                                                                 sorted_tokens, src, out);
    detail::check_ops_launch();
    own.release(exec.stream);
  }

  // Queued on the stream (cuda::zero / copy would wait on the legacy stream instead,
  // unordered with the layers' stream).
  template <class T>
  static void fill_zero(const exec_type& exec, T* p, std::int64_t n) {
    if (n > 0) STRATA_CHECK_CUDA(cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(T), exec.stream));
  }
  template <class T>
  static void copy(const exec_type& exec, T* dst, const T* src, std::int64_t n) {
    if (n > 0)
      STRATA_CHECK_CUDA(
          cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(T), cudaMemcpyDeviceToDevice, exec.stream));
  }
  // row: float, or a 16-bit weight of a mixed trainer's (nn::weights_of); out: float or
  // 16-bit activations.
  template <class R, class T>
  static void broadcast_rows(const exec_type& exec, std::int64_t rows, std::int64_t cols, const R* row, T* out) {
    if (rows == 0 || cols == 0) return;
    map(exec, rows * cols, detail::broadcast_rows_fn<R, T>{row, out, cols});
  }
  template <class T>
  static void add_into(const exec_type& exec, std::int64_t n, T* a, const T* b) {
    map(exec, n, detail::add_into_fn<T>{a, b});
  }

 private:
  template <class A, class B, class C>
  static constexpr bool all_float = std::is_same_v<A, float> && std::is_same_v<B, float> && std::is_same_v<C, float>;

  // The 16-bit type of a GEMM: that of its 16-bit operands (one type per call), or
  // exec.gemm's where all three are float.
  template <class A, class B, class C>
  static void gemm_16bit(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                         std::int64_t k, float alpha, const A* a, std::int64_t lda, std::int64_t stride_a, const B* b,
                         std::int64_t ldb, std::int64_t stride_b, float beta, C* c, std::int64_t ldc,
                         std::int64_t stride_c, std::int64_t batch) {
    if constexpr (detail::is_half<A> || detail::is_half<B> || detail::is_half<C>) {
      using T = std::conditional_t<detail::is_half<A>, A, std::conditional_t<detail::is_half<B>, B, C>>;
      static_assert((!detail::is_half<A> || std::is_same_v<A, T>) && (!detail::is_half<B> || std::is_same_v<B, T>) &&
                        (!detail::is_half<C> || std::is_same_v<C, T>),
                    "strata: a GEMM's 16-bit operands must all be bf16 or all fp16");
      gemm_16bit_as<T>(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
    } else if (exec.gemm == gemm_operands::bf16) {
      gemm_16bit_as<bf16>(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                          batch);
    } else {
      gemm_16bit_as<fp16>(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                          batch);
    }
  }

  // One cublasGemmStridedBatchedEx in T with fp32 compute. A float operand is rounded to
  // T (RNE, as the compute params' own) and packed into the scratch (batch matrices of A,
  // then of B); a T operand is read where it lives. A product of two 16-bit values is
  // exact in fp32, so only the accumulation rounds, as in an fp32 GEMM, and a 16-bit C
  // rounds once at the end.
  template <class T, class A, class B, class C>
  static void gemm_16bit_as(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                            std::int64_t k, float alpha, const A* a, std::int64_t lda, std::int64_t stride_a,
                            const B* b, std::int64_t ldb, std::int64_t stride_b, float beta, C* c, std::int64_t ldc,
                            std::int64_t stride_c, std::int64_t batch) {
    constexpr bool pack_a = !std::is_same_v<A, T>, pack_b = !std::is_same_v<B, T>;
    // The operands as stored (row-major): A is m x k, or k x m transposed; B k x n, or n x k.
    const std::int64_t a_rows = ta == transpose::yes ? k : m, a_cols = ta == transpose::yes ? m : k;
    const std::int64_t b_rows = tb == transpose::yes ? n : k, b_cols = tb == transpose::yes ? k : n;
    const std::int64_t a_n = pack_a ? batch * a_rows * a_cols : 0, b_n = pack_b ? batch * b_rows * b_cols : 0;
    const std::size_t a_bytes = detail::cuda_aligned(static_cast<std::size_t>(a_n) * sizeof(T));
    cuda_scratch own;
    char* base = nullptr;
    if (a_n + b_n > 0)
      base = static_cast<char*>(
          (exec.scratch ? *exec.scratch : own).get(a_bytes + static_cast<std::size_t>(b_n) * sizeof(T), exec.stream));
    const auto operand = [&](const auto* in, std::int64_t n_packed, char* at, std::int64_t rows, std::int64_t cols,
                             std::int64_t ld, std::int64_t stride) -> std::tuple<const T*, std::int64_t, std::int64_t> {
      using In = std::remove_cvref_t<decltype(*in)>;
      if constexpr (std::is_same_v<In, T>) {
        return {in, ld, stride};
      } else {
        T* packed = reinterpret_cast<T*>(at);
        map(exec, n_packed, detail::pack_operand_fn<T, In>{in, packed, rows, cols, ld, stride});
        return {packed, cols, rows * cols};
      }
    };
    const auto [a16, a_ld, a_stride] = operand(a, a_n, base, a_rows, a_cols, lda, stride_a);
    const auto [b16, b_ld, b_stride] = operand(b, b_n, base + a_bytes, b_rows, b_cols, ldb, stride_b);
    constexpr cudaDataType_t type = detail::cuda_data_type<T>;
    STRATA_CHECK_CUBLAS(cublasGemmStridedBatchedEx(
        exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &alpha, b16, type, detail::cublas_ld(b_ld),
        static_cast<long long>(batch > 1 ? b_stride : 0), a16, type, detail::cublas_ld(a_ld),
        static_cast<long long>(batch > 1 ? a_stride : 0), &beta, c, detail::cuda_data_type<C>, detail::cublas_ld(ldc),
        static_cast<long long>(batch > 1 ? stride_c : 0), static_cast<int>(batch), CUBLAS_COMPUTE_32F,
        CUBLAS_GEMM_DEFAULT));
    own.release(exec.stream);
  }
};

}  // namespace strata
