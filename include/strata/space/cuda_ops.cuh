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
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "cuda.hpp"
#include "cuda_transfer.hpp"
#include "detail/cublas_check.hpp"
#include "ops.hpp"
#include "tensor.hpp"

namespace strata {

namespace detail {

// Threads per block of every kernel here. Kernels are templates (on the block size or a
// functor) so that these headers can be included by several .cu files of one program
// without duplicate kernel symbols.
inline constexpr int cuda_ops_block = 256;
// Blocks of a kernel that loops over rows, tiles or elements: enough to fill any current
// GPU (132 SMs x 8 resident blocks of 256 threads) many times over; more would only add
// scheduling. Results never depend on it: every item is one block's or thread's work.
inline constexpr std::int64_t cuda_ops_max_blocks = 1 << 16;

inline unsigned cuda_blocks_for(std::int64_t items) {
  return static_cast<unsigned>(std::max<std::int64_t>(1, std::min(items, cuda_ops_max_blocks)));
}
// The most blocks a grid takes in y (CUDA's limit).
inline constexpr std::int64_t cuda_max_grid_y = 65535;
inline unsigned cuda_blocks_for_threads(std::int64_t threads) {
  return cuda_blocks_for((threads + cuda_ops_block - 1) / cuda_ops_block);
}

inline void check_ops_launch() { STRATA_CHECK_CUDA(cudaGetLastError()); }

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

// One block: each thread sums a fixed stride of terms, CUB combines them in a fixed
// tree. Enough for a loss (one term per row or element, read once).
template <class Term>
__global__ void __launch_bounds__(cuda_ops_block) mean_kernel(std::int64_t n, Term term, double count, float* out) {
  using reduce = cub::BlockReduce<double, cuda_ops_block>;
  __shared__ typename reduce::TempStorage temp;
  double s = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += cuda_ops_block) s += term(i);
  s = reduce(temp).Sum(s);
  if (threadIdx.x == 0) *out = count != 0.0 ? static_cast<float>(s / count) : 0.0f;
}

// The host's test of an id: a whole number in [0, limit) (or ignore_label, for labels).
__device__ inline bool is_id(float v, std::int64_t limit, bool labels) {
  return (v >= 0.0f && v < static_cast<float>(limit) && v == floorf(v)) || (labels && v == ignore_label);
}

// The smallest position whose value is not an id goes to *first (atomicMin on an integer
// is order-free, so the result is deterministic).
template <int Block>
__global__ void __launch_bounds__(Block)
    check_ids_kernel(std::int64_t n, std::int64_t limit, const float* values, bool labels, unsigned long long* first) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * Block;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * Block + threadIdx.x; i < n; i += stride)
    if (!is_id(values[i], limit, labels)) atomicMin(first, static_cast<unsigned long long>(i));
}

// A check's result on the device: the first bad position (all bits set: none) and its value.
struct id_slot {
  unsigned long long first;
  float value;
};

// slot->value = the value at the first bad position, where there is one.
template <int Block>
__global__ void __launch_bounds__(Block) flagged_value_kernel(std::int64_t n, const float* values, id_slot* slot) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && slot->first < static_cast<unsigned long long>(n))
    slot->value = values[slot->first];
}

// Queues the check of values[0, n) into *first on s (no wait).
inline void queue_id_check(cudaStream_t s, std::int64_t n, std::int64_t limit, const float* values, bool labels,
                           unsigned long long* first) {
  // All bits set: larger than every position, so atomicMin finds the first.
  STRATA_CHECK_CUDA(cudaMemsetAsync(first, 0xff, sizeof(unsigned long long), s));
  if (n <= 0) return;
  strata::detail::clear_stale_cuda_error();
  check_ids_kernel<cuda_ops_block>
      <<<cuda_blocks_for_threads(n), cuda_ops_block, 0, s>>>(n, limit, values, labels, first);
  check_ops_launch();
}

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
template <int Block>
__global__ void __launch_bounds__(Block)
    scatter_runs_kernel(std::int64_t n, std::int64_t d, std::int64_t local, const unsigned* keys,
                        const unsigned* tokens, const float* src, float* out) {
  for (std::int64_t s = blockIdx.x; s < n; s += gridDim.x) {
    const unsigned row = keys[s];
    if (row >= local || (s > 0 && keys[s - 1] == row)) continue;
    float* o = out + static_cast<std::int64_t>(row) * d;
    for (std::int64_t j = threadIdx.x; j < d; j += Block) {
      float acc = o[j];
      for (std::int64_t u = s; u < n && keys[u] == row; ++u) acc += src[static_cast<std::int64_t>(tokens[u]) * d + j];
      o[j] = acc;
    }
  }
}

// Bytes rounded up to what cudaMalloc aligns to, for several arrays in one scratch.
inline std::size_t cuda_aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

template <class R>
struct broadcast_rows_fn {
  const R* row;
  float* out;
  std::int64_t cols;
  __device__ void operator()(std::int64_t i) const { out[i] = static_cast<float>(row[i % cols]); }
};
struct add_into_fn {
  float* a;
  const float* b;
  __device__ void operator()(std::int64_t i) const { a[i] += b[i]; }
};

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
template <class T>
struct pack_operand_fn {
  const float* in;
  T* out;
  std::int64_t rows, cols, ld, stride;
  __device__ void operator()(std::int64_t i) const {
    const std::int64_t per = rows * cols, q = i / per, rc = i - q * per, r = rc / cols;
    out[i] = T(in[q * stride + r * ld + (rc - r * cols)]);
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
  // With 16-bit operands (exec.gemm) A and B are rounded into the executor's scratch
  // first and cuBLAS multiplies them on tensor cores, accumulating in fp32 into fp32 C.
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta,
                   float* c, std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    detail::require_int_extents(m, n, k, lda, ldb, ldc);
    if (exec.gemm != gemm_operands::fp32) {
      gemm_16bit(exec, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
      return;
    }
    STRATA_CHECK_CUBLAS(cublasSgemm(exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n),
                                    static_cast<int>(m), static_cast<int>(k), &alpha, b, detail::cublas_ld(ldb), a,
                                    detail::cublas_ld(lda), &beta, c, detail::cublas_ld(ldc)));
  }

  // B already 16-bit (a mixed trainer's weights, nn::weights_of): only A is rounded, to
  // B's type, and B is read where it lives.
  template <class W>
  requires(std::is_same_v<W, bf16> || std::is_same_v<W, fp16>)
  static void gemm(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n, std::int64_t k,
                   float alpha, const float* a, std::int64_t lda, const W* b, std::int64_t ldb, float beta, float* c,
                   std::int64_t ldc) {
    if (m == 0 || n == 0) return;
    detail::require_int_extents(m, n, k, lda, ldb, ldc);
    gemm_16bit_as<W>(exec, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }

  static void gemm_strided_batched(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                                   std::int64_t k, float alpha, const float* a, std::int64_t lda, std::int64_t stride_a,
                                   const float* b, std::int64_t ldb, std::int64_t stride_b, float beta, float* c,
                                   std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
    if (m == 0 || n == 0 || batch == 0) return;
    detail::require_int_extents(m, n, k, lda, ldb, ldc, batch);
    if (exec.gemm != gemm_operands::fp32) {
      gemm_16bit(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
      return;
    }
    STRATA_CHECK_CUBLAS(cublasSgemmStridedBatched(
        exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n), static_cast<int>(m),
        static_cast<int>(k), &alpha, b, detail::cublas_ld(ldb), static_cast<long long>(stride_b), a,
        detail::cublas_ld(lda), static_cast<long long>(stride_a), &beta, c, detail::cublas_ld(ldc),
        static_cast<long long>(stride_c), static_cast<int>(batch)));
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

  template <class Term>
  static void mean(const exec_type& exec, std::int64_t n, const Term& term, double count, float* out) {
    strata::detail::clear_stale_cuda_error();
    detail::mean_kernel<<<1, detail::cuda_ops_block, 0, exec.stream>>>(n, term, count, out);
    detail::check_ops_launch();
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
  static void scatter_add_rows(const exec_type& exec, std::int64_t n, std::int64_t d, std::int64_t lo,
                               std::int64_t local, const float* ids, const float* src, float* out) {
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
  static void fill_zero(const exec_type& exec, float* p, std::int64_t n) {
    if (n > 0) STRATA_CHECK_CUDA(cudaMemsetAsync(p, 0, static_cast<std::size_t>(n) * sizeof(float), exec.stream));
  }
  static void copy(const exec_type& exec, float* dst, const float* src, std::int64_t n) {
    if (n > 0)
      STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                                        exec.stream));
  }
  // row: float, or a 16-bit weight of a mixed trainer's (nn::weights_of).
  template <class R>
  static void broadcast_rows(const exec_type& exec, std::int64_t rows, std::int64_t cols, const R* row, float* out) {
    if (rows == 0 || cols == 0) return;
    map(exec, rows * cols, detail::broadcast_rows_fn<R>{row, out, cols});
  }
  static void add_into(const exec_type& exec, std::int64_t n, float* a, const float* b) {
    map(exec, n, detail::add_into_fn{a, b});
  }

 private:
  // Both operands rounded to exec.gemm's type and packed into one scratch (batch
  // matrices of A, then of B), then one cublasGemmStridedBatchedEx with fp32 compute and
  // an fp32 C. The rounding is RNE, as the compute params' own; a product of two 16-bit
  // values is exact in fp32, so only the accumulation rounds, as in an fp32 GEMM.
  static void gemm_16bit(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                         std::int64_t k, float alpha, const float* a, std::int64_t lda, std::int64_t stride_a,
                         const float* b, std::int64_t ldb, std::int64_t stride_b, float beta, float* c,
                         std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
    if (exec.gemm == gemm_operands::bf16)
      gemm_16bit_as<bf16>(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                          batch);
    else
      gemm_16bit_as<fp16>(exec, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c,
                          batch);
  }

  // B is float (rounded and packed like A) or already T (read as it is stored).
  template <class T, class BIn>
  static void gemm_16bit_as(const exec_type& exec, transpose ta, transpose tb, std::int64_t m, std::int64_t n,
                            std::int64_t k, float alpha, const float* a, std::int64_t lda, std::int64_t stride_a,
                            const BIn* b, std::int64_t ldb, std::int64_t stride_b, float beta, float* c,
                            std::int64_t ldc, std::int64_t stride_c, std::int64_t batch) {
    constexpr cudaDataType_t type = std::is_same_v<T, bf16> ? CUDA_R_16BF : CUDA_R_16F;
    constexpr bool pack_b = !std::is_same_v<BIn, T>;
    // The operands as stored (row-major): A is m x k, or k x m transposed; B k x n, or n x k.
    const std::int64_t a_rows = ta == transpose::yes ? k : m, a_cols = ta == transpose::yes ? m : k;
    const std::int64_t b_rows = tb == transpose::yes ? n : k, b_cols = tb == transpose::yes ? k : n;
    const std::int64_t a_n = batch * a_rows * a_cols, b_n = pack_b ? batch * b_rows * b_cols : 0;
    const std::size_t a_bytes = detail::cuda_aligned(static_cast<std::size_t>(a_n) * sizeof(T));
    cuda_scratch own;
    const std::size_t bytes = std::max<std::size_t>(a_bytes + static_cast<std::size_t>(b_n) * sizeof(T), 1);
    char* base = static_cast<char*>((exec.scratch ? *exec.scratch : own).get(bytes, exec.stream));
    T* a16 = reinterpret_cast<T*>(base);
    map(exec, a_n, detail::pack_operand_fn<T>{a, a16, a_rows, a_cols, lda, stride_a});
    const T* b16 = nullptr;
    std::int64_t b_ld = ldb, b_stride = stride_b;
    if constexpr (pack_b) {
      T* packed = reinterpret_cast<T*>(base + a_bytes);
      map(exec, b_n, detail::pack_operand_fn<T>{b, packed, b_rows, b_cols, ldb, stride_b});
      b16 = packed;
      b_ld = b_cols;
      b_stride = b_rows * b_cols;
    } else {
      b16 = b;
    }
    STRATA_CHECK_CUBLAS(
        cublasGemmStridedBatchedEx(exec.blas, detail::cublas_op(tb), detail::cublas_op(ta), static_cast<int>(n),
                                   static_cast<int>(m), static_cast<int>(k), &alpha, b16, type, detail::cublas_ld(b_ld),
                                   static_cast<long long>(batch > 1 ? b_stride : 0), a16, type,
                                   detail::cublas_ld(a_cols), static_cast<long long>(a_rows * a_cols), &beta, c,
                                   CUDA_R_32F, detail::cublas_ld(ldc), static_cast<long long>(batch > 1 ? stride_c : 0),
                                   static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    own.release(exec.stream);
  }
};

// A GPU trainer's id checks (space/ops.hpp): each is queued on the stream into its own
// slot, and settle() reads every slot back in one copy, once per step, throwing the
// first failure in queue order with the layer's message. The host thus waits once per
// step instead of at every embedding and loss forward.
template <>
class deferred_id_checks<cuda> {
 public:
  using message_fn = std::function<std::string(float, std::int64_t)>;
  // Checks between two settles; a step with more settles early (one more wait).
  static constexpr std::size_t capacity = 256;

  deferred_id_checks() : slots_(capacity), host_(capacity) {}

  void queue(const executor<cuda>& exec, std::int64_t n, std::int64_t limit, const float* values, bool labels,
             message_fn message, std::source_location loc) {
    if (pending_.size() == capacity || (!pending_.empty() && exec.stream != stream_)) settle();
    stream_ = exec.stream;
    detail::id_slot* slot = slots_.data() + pending_.size();
    detail::queue_id_check(exec.stream, n, limit, values, labels, &slot->first);
    if (n > 0) {
      detail::flagged_value_kernel<1><<<1, 1, 0, exec.stream>>>(n, values, slot);
      detail::check_ops_launch();
    }
    pending_.push_back({std::move(message), n, loc});
  }

  // Waits for the queued checks (through wait_stream: a failed peer is an error, not a
  // hang) and throws the first that failed; none are left queued either way.
  void settle() {
    if (pending_.empty()) return;
    const std::vector<entry> pending = std::move(pending_);
    pending_.clear();
    strata::download(stream_, host_.data(), slots_.data(), pending.size() * sizeof(detail::id_slot));
    for (std::size_t k = 0; k < pending.size(); ++k) {
      const detail::id_slot& slot = host_.data()[k];
      const entry& e = pending[k];
      expects<error>(
          slot.first >= static_cast<unsigned long long>(e.n),
          [&] { return e.message(slot.value, static_cast<std::int64_t>(slot.first)); }, e.loc);
    }
  }
  std::size_t queued() const noexcept { return pending_.size(); }

 private:
  struct entry {
    message_fn message;
    std::int64_t n;
    std::source_location loc;
  };
  buffer<detail::id_slot, cuda> slots_;
  buffer<detail::id_slot, pinned> host_;
  std::vector<entry> pending_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace strata
