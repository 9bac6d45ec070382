// Owning wrappers of CUDA streams and events (move-only RAII), the ordering tools the
// device space, the CUDA kernel drivers and the NCCL communicator share.
#pragma once
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "../core/trace.hpp"
#include "detail/cuda_check.hpp"

namespace strata {

class cuda_event;
inline void wait_stream(cudaStream_t s);

// A stream created on the current device. Non-blocking by default: work on it is not
// implicitly ordered with the legacy default stream, so ordering is always explicit
// (events), which is what lets communication overlap computation.
class cuda_stream {
 public:
  enum class sync_mode { non_blocking, blocking };

  explicit cuda_stream(sync_mode mode = sync_mode::non_blocking, int priority = 0) {
    const unsigned flags = mode == sync_mode::non_blocking ? cudaStreamNonBlocking : cudaStreamDefault;
    STRATA_CHECK_CUDA(cudaStreamCreateWithPriority(&s_, flags, priority));
  }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  cuda_stream(cuda_stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& o) noexcept {
    if (this != &o) {
      release();
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~cuda_stream() { release(); }

  cudaStream_t get() const noexcept { return s_; }
  // Blocks the host until all work queued so far has finished.
  // (Through wait_stream: a stream stuck on a failed peer's collective is an error.)
  inline void synchronize() const;
  // True when all work queued so far has finished.
  bool done() const { return detail::query_finished(cudaStreamQuery(s_), "cudaStreamQuery"); }
  // Work queued on this stream after the call waits for `e` (no host block).
  inline void wait(const cuda_event& e) const;

 private:
  void release() noexcept {
    // Destroying a stream with pending work is allowed: the work still completes.
    if (s_) (void)cudaStreamDestroy(s_);
    s_ = nullptr;
  }
  cudaStream_t s_ = nullptr;
};

// An event created on the current device. Without timing (the default) it is a pure
// ordering point, which is cheaper to record and to wait on.
class cuda_event {
 public:
  enum class timing { off, on };

  explicit cuda_event(timing t = timing::off) {
    STRATA_CHECK_CUDA(cudaEventCreateWithFlags(&e_, t == timing::on ? cudaEventDefault : cudaEventDisableTiming));
  }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  cuda_event(cuda_event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  cuda_event& operator=(cuda_event&& o) noexcept {
    if (this != &o) {
      release();
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  ~cuda_event() { release(); }

  cudaEvent_t get() const noexcept { return e_; }
  // Captures the work queued on `s` so far (nullptr: the legacy default stream).
  void record(cudaStream_t s) { STRATA_CHECK_CUDA(cudaEventRecord(e_, s)); }
  void record(const cuda_stream& s) { record(s.get()); }
  void synchronize() const { STRATA_CHECK_CUDA(cudaEventSynchronize(e_)); }
  // True once the captured work has finished (also for an event never recorded).
  bool done() const { return detail::query_finished(cudaEventQuery(e_), "cudaEventQuery"); }
  // Milliseconds between two recorded, completed events made with timing::on.
  friend float elapsed_ms(const cuda_event& start, const cuda_event& stop) {
    float ms = 0;
    STRATA_CHECK_CUDA(cudaEventElapsedTime(&ms, start.e_, stop.e_));
    return ms;
  }

 private:
  void release() noexcept {
    if (e_) (void)cudaEventDestroy(e_);
    e_ = nullptr;
  }
  cudaEvent_t e_ = nullptr;
};

inline void cuda_stream::synchronize() const { wait_stream(s_); }
inline void cuda_stream::wait(const cuda_event& e) const { STRATA_CHECK_CUDA(cudaStreamWaitEvent(s_, e.get(), 0)); }

// Makes `s` (nullptr: the legacy default stream) wait for `e` without blocking the host.
inline void stream_wait(cudaStream_t s, const cuda_event& e) { STRATA_CHECK_CUDA(cudaStreamWaitEvent(s, e.get(), 0)); }

namespace detail {

// What may keep a stream from finishing that the stream cannot tell: a collective whose
// peer failed or never came. Each NCCL communicator registers a check here while it
// lives; the check throws (after aborting its communicator, which releases the kernels
// stuck on it) when NCCL reports an error, or when an operation has been runnable for
// longer than its time-out.
class stream_watch {
 public:
  using check = std::function<void()>;
  static stream_watch& get() {
    static stream_watch w;
    return w;
  }
  std::uint64_t add(check c) {
    std::lock_guard lock(m_);
    checks_.emplace_back(++next_, std::move(c));
    return next_;
  }
  void remove(std::uint64_t id) {
    std::lock_guard lock(m_);
    std::erase_if(checks_, [id](const auto& e) { return e.first == id; });
  }
  void run() {
    std::vector<check> now;
    {
      std::lock_guard lock(m_);
      for (auto& e : checks_) now.push_back(e.second);
    }
    for (auto& c : now) c();
  }

 private:
  std::mutex m_;
  std::vector<std::pair<std::uint64_t, check>> checks_;
  std::uint64_t next_ = 0;
};

}  // namespace detail

// Blocks the host until the work queued on `s` has finished. Unlike cudaStreamSynchronize
// it cannot hang on a failed peer: while waiting it polls the live NCCL communicators,
// which throw a comm_error naming themselves on an error or past their time-out.
inline void wait_stream(cudaStream_t s) {
  const auto start = std::chrono::steady_clock::now();
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    if (detail::query_finished(cudaStreamQuery(s), "cudaStreamQuery")) {
      if (auto* profile = detail::this_thread_profile())
        profile->waited_for_device(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return;
    }
    detail::stream_watch::get().run();
    // Spin briefly (most waits are short), then back off to at most a millisecond.
    if (pause.count() == 0)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(pause);
    if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(200))
      pause = pause.count() == 0 ? std::chrono::microseconds(2) : std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace strata
