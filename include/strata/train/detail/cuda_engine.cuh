// engine<cuda>: the trainer's buffer work on a GPU. Everything is queued on one compute
// stream (which the trainer's NCCL communicators are ordered against, and which its
// cuBLAS handle is bound to); the host blocks only where it needs a value: the squared
// norm, the loss, and moving weights for checkpoints and offload. Scalars and
// host-side data (checkpoints, gathered weights) stay on the grid's host communicators.
#pragma once
#include <cublas_v2.h>

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

#include "../../comm/device_comm.hpp"
#include "../../kernels/cuda_driver.cuh"
#include "../../kernels/cuda_reduce.cuh"
#include "../../optim/cuda_optim.cuh"
#include "../../space/cuda.hpp"
#include "../../space/cuda_memory.hpp"
#include "../../space/cuda_stream.hpp"
#include "../../space/cuda_transfer.hpp"
#include "../../space/detail/cublas_check.hpp"
#include "../../space/detail/cuda_check.hpp"
#include "engine.hpp"

namespace strata::detail {

namespace engine_ops {
struct fill {
  float* p;
  float v;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { p[i] = v; }
};
struct add {
  float* acc;
  const float* in;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { acc[i] += in[i]; }
};
template <class P>
struct widen {
  const P* in;
  float* acc;
  bool first;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const {
    const float v = static_cast<float>(in[i]);
    acc[i] = first ? v : acc[i] + v;
  }
};
template <class P>
struct round_through {
  const float* in;
  float* out;
  STRATA_HOST_DEVICE void operator()(std::size_t i) const { out[i] = static_cast<float>(strata::round_to<P>(in[i])); }
};
}  // namespace engine_ops

// A step profile's timeline on a GPU: CUDA events recorded on the compute stream, kept
// for the next step (a step makes about four a layer). seconds(i, j) reads the device's
// time between two once both have happened (after a synchronize).
class cuda_marks {
 public:
  explicit cuda_marks(cudaStream_t stream) noexcept : stream_(stream) {}
  cuda_marks(const cuda_marks&) = delete;
  cuda_marks& operator=(const cuda_marks&) = delete;
  ~cuda_marks() {
    for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
  }
  void reset() noexcept { used_ = 0; }
  void mark() {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      STRATA_CHECK_CUDA(cudaEventCreate(&e));
      events_.push_back(e);
    }
    STRATA_CHECK_CUDA(cudaEventRecord(events_[used_++], stream_));
  }
  double seconds(std::size_t i, std::size_t j) const {
    float ms = 0;
    STRATA_CHECK_CUDA(cudaEventElapsedTime(&ms, events_[i], events_[j]));
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
};

template <>
class engine<cuda> {
 public:
  explicit engine(std::size_t largest) : reducer_(largest > 0 ? largest : 1) {
    // cuBLAS's default workspace pool and its handle's state are not strata's allocations.
    meter_.measure(&device_memory::cublas, [&] { STRATA_CHECK_CUBLAS(cublasCreate(&blas_)); });
    STRATA_CHECK_CUBLAS(cublasSetStream(blas_, stream_.get()));
    // cuBLAS's single-stream results are the same bits run to run. (16-bit operands, in
    // mixed precision, take tensor cores whatever the math mode.)
    STRATA_CHECK_CUBLAS(cublasSetMathMode(blas_, strata::detail::cublas_math_mode));
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() {
    try {
      synchronize();
    } catch (...) {  // a failed peer: its communicator was aborted; nothing is left to wait for
    }
    (void)cublasDestroy(blas_);
  }

  // NCCL or MPI, as STRATA_DEVICE_COMM says (read once, when the engine is made).
  using comm_type = device_comm;

  executor<cuda> exec() const noexcept { return {stream_.get(), blas_, &scratch_, gemm_}; }
  // The layers' GEMMs read P operands: fp32 as stored, or bf16/fp16 on tensor cores
  // (mixed precision; fp32 accumulation and results either way).
  template <class P>
  void use_gemm_operands() noexcept {
    gemm_ = std::is_same_v<P, bf16>   ? gemm_operands::bf16
            : std::is_same_v<P, fp16> ? gemm_operands::fp16
                                      : gemm_operands::fp32;
  }
  // The layers' id checks, read back once per step (settle_id_checks) instead of each
  // waiting for the device.
  deferred_id_checks<cuda>* id_checks() noexcept { return &id_checks_; }
  void settle_id_checks() { id_checks_.settle(); }
  cudaStream_t stream() const noexcept { return stream_.get(); }
  device_comm_kind comm_kind() const noexcept { return comm_kind_; }
  // A step profile's timeline (train/step_profile.hpp): events on the compute stream.
  using marks_type = cuda_marks;
  cuda_marks& marks() noexcept { return marks_; }
  // Collective over `world`, before any NCCL init: two ranks on one GPU are the same
  // config_error on every rank, naming both. (Each communicator checks its own group
  // too, but ranks of other groups would then wait in their init for the time-out.)
  // Only NCCL needs a GPU per process; MPI's device communicator shares one.
  template <class HostComm>
  void check_one_process_per_gpu(HostComm& world) {
    if (comm_kind_ == device_comm_kind::nccl)
      strata::detail::check_one_process_per_gpu(world, current_device(), "world");
  }
  // A device communicator over the processes of `host` (collective over it), ordered
  // against this engine's stream: its operations wait for the work queued so far, and
  // waiting on one orders later work after it.
  template <class HostComm>
  device_comm make_comm(HostComm& host, const char* name) {
    const auto from = meter_.mark_now();  // its device memory: the used memory around its making
    device_comm c = device_comm::over(host, comm_kind_, stream_.get(), name);
    meter_.add_since(&device_memory::comms, from);
    return c;
  }
  // The device memory of this trainer's run (space/cuda_memory.hpp): sampled when the
  // buffers are all held (after a step), read with the device part of the report.
  void sample_memory() { meter_.sample(); }
  device_memory memory(std::size_t report) { return meter_.read(report); }

  // The host waits with an eye on the NCCL communicators: a failed peer is an error
  // (after their time-out at worst), never a hang.
  void synchronize() { wait_stream(stream_.get()); }

  void fill(float* p, std::size_t n, float v) { kernels::run_cuda(n, engine_ops::fill{p, v}, stream()); }
  // dst may be pinned host memory (ZeRO-3's offloaded params): the kind follows the pointers.
  void copy(float* dst, const float* src, std::size_t n) {
    if (n) STRATA_CHECK_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDefault, stream()));
  }
  void accumulate(float* acc, const float* in, std::size_t n, bool first) {
    if (first)
      copy(acc, in, n);
    else
      kernels::run_cuda(n, engine_ops::add{acc, in}, stream());
  }
  template <class P>
  void narrow(const float* in, P* out, std::size_t n) {
    kernels::cast_cuda(std::span<const float>(in, n), std::span<P>(out, n), stream());
  }
  template <class P>
  void widen_accumulate(const P* in, float* acc, std::size_t n, bool first) {
    kernels::run_cuda(n, engine_ops::widen<P>{in, acc, first}, stream());
  }
  template <class P>
  void round_into(const float* master, float* out, std::size_t n) {
    if constexpr (std::is_same_v<P, float>)
      copy(out, master, n);
    else
      kernels::run_cuda(n, engine_ops::round_through<P>{master, out}, stream());
  }
  // One CUB reduction per run into its own slot, summed on the host in run order: the
  // same value every run (CUB's partial-sum layout is fixed) at one synchronization.
  double sum_squares(const float* base, std::span<const index_range> runs) {
    if (partials_.size() < runs.size()) {
      partials_ = buffer<double, cuda>(runs.size());
      partials_host_ = buffer<double, pinned>(runs.size());
    }
    for (std::size_t i = 0; i < runs.size(); ++i)
      reducer_.sum_squares_async(std::span<const float>(base + runs[i].first, runs[i].second - runs[i].first),
                                 partials_.data() + i, stream());
    if (runs.empty()) return 0;
    cuda::copy_async(partials_host_.data(), partials_.data(), runs.size() * sizeof(double), stream());
    synchronize();
    double sq = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) sq += partials_host_[i];
    return sq;
  }

  // A group of runs in one launch: its runs (with their decay flags) go to the device once
  // (groups as engine<host> says: 0 the shard, else one bucket of a ZeRO-0 step).
  void prepare_step(std::span<const update_run> runs, std::size_t n, std::size_t group = 0) {
    std::vector<decay_run> d;
    for (const auto& r : runs) d.push_back({r.begin, r.end - r.begin, r.decay, r.out_shift()});
    if (tables_.size() <= group) tables_.resize(group + 1);
    tables_[group] = cuda_run_table(d, n);
  }
  template <class Optimizer, class P>
  void step(const Optimizer& opt, const shard_args<P, float>& a, float lr, float grad_scale, long step,
            std::size_t group = 0) {
    step_runs_cuda(opt, a, tables_.at(group), lr, grad_scale, step, stream());
  }

  // Host <-> device after the stream's work; both return when the data has landed, and
  // neither hangs on a failed peer's collective (space/cuda_transfer.hpp).
  void download(float* host_dst, const float* src, std::size_t n) {
    strata::download(stream(), host_dst, src, n * sizeof(float));
  }
  void upload(float* dst, const float* host_src, std::size_t n) {
    strata::upload(stream(), dst, host_src, n * sizeof(float));
  }
  // Queued only: host_src must be pinned and stay unchanged until the stream passes it.
  template <class T>
  void upload_async(T* dst, const T* host_src, std::size_t n) {
    if (n) cuda::copy_async(dst, host_src, n * sizeof(T), stream());
  }

 private:
  device_comm_kind comm_kind_ = device_comm_from_env();  // first: a bad value fails before any CUDA work
  // Before the stream and every buffer: its start is the run's.
  cuda_memory_meter meter_;
  cuda_stream stream_;
  cublasHandle_t blas_ = nullptr;
  mutable cuda_scratch scratch_;  // lent to the layers with the stream (exec())
  gemm_operands gemm_ = gemm_operands::fp32;
  deferred_id_checks<cuda> id_checks_;
  kernels::cuda_reducer<float> reducer_;
  std::vector<cuda_run_table> tables_;
  buffer<double, cuda> partials_;
  buffer<double, pinned> partials_host_;
  cuda_marks marks_{stream_.get()};
};

}  // namespace strata::detail
