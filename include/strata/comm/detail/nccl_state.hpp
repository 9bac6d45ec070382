// What stands behind one nccl_comm: the NCCL communicator, its communication stream, the
// events that order it against the compute stream, and the request source over them.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "../../core/buffer.hpp"
#include "../../space/cuda.hpp"
#include "../request.hpp"
#include "nccl_pending.hpp"
#include "nccl_types.hpp"
#include "runnable_clock.hpp"

namespace strata::detail {

class nccl_state final : public request_source {
 public:
  // Operations whose completion events are kept apart; a request older than this many
  // operations waits on a newer event of its slot, which the stream order makes safe.
  static constexpr std::size_t ring = 64;

  // Takes ownership of `comm`, made on `device`.
  nccl_state(ncclComm_t comm, int device, cudaStream_t compute, std::string name, std::chrono::duration<double> timeout)
      : comm_(comm),
        device_(device),
        compute_(compute),
        name_(std::move(name)),
        timeout_(timeout),
        guard_(device),
        stream_(),
        word_(1) {
    STRATA_CHECK_NCCL(ncclCommUserRank(comm_, &rank_));
    STRATA_CHECK_NCCL(ncclCommCount(comm_, &size_));
    // A host blocked on a stream that waits for this communicator learns of its failure.
    watch_ = stream_watch::get().add([this] {
      if (comm_aborted_) return;
      check_async("a queued operation");
      check_timeout();
    });
  }
  nccl_state(const nccl_state&) = delete;
  nccl_state& operator=(const nccl_state&) = delete;

  ~nccl_state() {
    stream_watch::get().remove(watch_);
    if (comm_aborted_) return;
    device_guard g(device_, std::nothrow);
    // Waits with the time-out: a peer that died must not hang this one's exit.
    if (!failed_) {
      try {
        synchronize();
      } catch (...) {
        failed_ = true;
      }
    }
    if (comm_aborted_) return;
    // A communicator that failed cannot be destroyed cleanly: abort it. A healthy one is
    // finalized first (with every rank: non-blocking, so a peer gone by now costs the
    // time-out, not a hang), then destroyed.
    if (!failed_ && nccl_settle(comm_, ncclCommFinalize(comm_), deadline_in(timeout_)) == ncclSuccess)
      (void)ncclCommDestroy(comm_);
    else
      (void)ncclCommAbort(comm_);
  }

  ncclComm_t comm() const noexcept { return comm_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  int device() const noexcept { return device_; }
  cudaStream_t stream() const noexcept { return stream_.get(); }
  cudaStream_t compute() const noexcept { return compute_; }
  void set_compute(cudaStream_t s) noexcept { compute_ = s; }
  const std::string& name() const noexcept { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  std::chrono::duration<double> timeout() const noexcept { return timeout_; }
  void set_timeout(std::chrono::duration<double> t) { timeout_ = checked_comm_timeout(t); }
  int* barrier_word() noexcept { return word_.data(); }

  // Orders the communication stream after the work queued on the compute stream so far
  // (recorded in the next operation's slot: its time-out does not start before that work is done).
  void begin() {
    slot& s = ring_[(last_ + 1) % ring];
    s.ready.record(compute_);
    stream_.wait(s.ready);
  }
  // Marks the end of operation `op` on the communication stream; returns its ticket.
  std::uint64_t finish(const char* op) { return mark_end(op, stream_.get(), false); }
  // The same for an operation queued on the compute stream itself (a blocking form): it
  // follows the operations before it, which NCCL runs in call order, also when the last
  // went on the communication stream.
  void begin_on_compute() {
    // (A finished one needs no wait: the query costs less than the wait's call.)
    if (last_ > 0 && !last_on_compute_ && !ring_[last_ % ring].done.done())
      stream_wait(compute_, ring_[last_ % ring].done);
  }
  std::uint64_t finish_on_compute(const char* op) { return mark_end(op, compute_, true); }

  // Device pointers already checked (nccl_comm::check_memory), the last few.
  bool known_device_pointer(const void* p) const noexcept {
    return std::find(known_.begin(), known_.end(), p) != known_.end();
  }
  void remember_device_pointer(const void* p) noexcept { known_[next_known_++ % known_.size()] = p; }

  // request_source: complete once the operation's event has fired.
  bool test(std::uint64_t ticket) override {
    check_async("test");
    return ring_[ticket % ring].done.done();
  }
  // Orders the compute stream after the operation (the host does not block), so work
  // queued there next sees the result; errors NCCL has reported are rethrown here.
  void wait(std::uint64_t ticket) override {
    check_async("wait");
    const slot& s = ring_[ticket % ring];
    if (s.ticket == ticket && s.on_compute) return;  // already in the compute stream's order
    device_guard g(device_);
    stream_wait(compute_, s.done);
  }

  // Blocks the host until every queued operation has finished, polling NCCL for errors;
  // past the time-out the communicator is aborted (a hung peer cannot be waited out).
  void synchronize() {
    if (last_ == 0) return;
    const slot& s = ring_[last_ % ring];
    auto pause = std::chrono::microseconds(1);
    while (!s.done.done()) {
      check_async(s.op);
      check_timeout();
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(1000)) pause *= 2;
    }
  }

  // Throws when NCCL reported an asynchronous error (a failed peer, a network error).
  void check_async(const char* op) {
    expects<comm_error>(!comm_aborted_,
                        [&] { return cat("nccl communicator ", name_, " was aborted after an error"); });
    ncclResult_t r = ncclSuccess;
    STRATA_CHECK_NCCL(ncclCommGetAsyncError(comm_, &r));
    if (r != ncclSuccess && r != ncclInProgress) fail(op, r);
  }

  // Throws a comm_error naming the communicator, rank and operation for a failed call.
  void check(ncclResult_t r, const char* op) {
    if (r == ncclSuccess) [[likely]]
      return;
    fail(op, r);
  }

  // The final result of a call that returned r: a non-blocking communicator's enqueue
  // may still be going on (ncclInProgress); past the time-out the communicator is aborted.
  ncclResult_t settle(ncclResult_t r, const char* op) {
    if (r != ncclInProgress) [[likely]]
      return r;
    r = nccl_settle(comm_, r, deadline_in(timeout_));
    if (r == ncclInProgress) fail(op, r);
    return r;
  }

  // For a call that failed with r, or did not finish in time (ncclInProgress): aborts this
  // communicator at once, since NCCL kernels stuck on a dead peer would otherwise stay on
  // the GPU and the next cudaFree (a destructor's, while the error unwinds) would wait on
  // them for ever; then runs `after_abort` (a split's child, which NCCL fills in only once
  // the parent's abort has joined the split), then throws the comm_error.
  template <class F>
  [[noreturn]] void fail(const char* op, ncclResult_t r, F&& after_abort) {
    // NCCL's text is read before the abort frees comm_.
    std::string what = r == ncclInProgress
                           ? cat(" did not finish within ", timeout_.count(),
                                 " s; the communicator was aborted. A peer rank probably failed or never called it "
                                 "(STRATA_COMM_TIMEOUT sets the time-out)")
                           : cat(" failed: ", nccl_error_text(r, comm_), "; the communicator was aborted");
    failed_ = true;
    (void)ncclCommAbort(comm_);
    comm_aborted_ = true;
    after_abort();
    throw comm_error(cat("nccl communicator ", name_, ", rank ", rank_, " of ", size_, ": ", op, what));
  }
  [[noreturn]] void fail(const char* op, ncclResult_t r) {
    fail(op, r, [] {});
  }

 private:
  std::uint64_t mark_end(const char* op, cudaStream_t on, bool on_compute) {
    const std::uint64_t t = ++last_;
    slot& s = ring_[t % ring];
    s.done.record(on);
    s.ticket = t;
    s.op = op;
    s.on_compute = on_compute;
    last_on_compute_ = on_compute;
    return t;
  }

  // Aborts once the oldest unfinished operation has been able to run for longer than the
  // time-out (runnable_clock): the collectives queued before it and the computation it
  // waits for do not count, so a deep queue of long collectives (a ZeRO-3 step's
  // prefetched gathers) never times a healthy one out.
  void check_timeout() {
    const auto now = std::chrono::steady_clock::now();
    oldest_ = std::max(oldest_, last_ >= ring ? last_ - ring + 1 : 1);
    while (oldest_ <= last_ && ring_[oldest_ % ring].done.done()) ++oldest_;
    if (oldest_ > last_) return;
    const slot& s = ring_[oldest_ % ring];
    // One on the compute stream has no ready event: it can run once the operations before
    // it have finished, which they have, it being the oldest unfinished (the compute
    // stream's kernels before it count towards its time-out then).
    if (clock_.runnable_for(oldest_, [&] { return s.on_compute || s.ready.done(); }, now) > timeout_)
      fail(s.op, ncclInProgress);
  }

  struct slot {
    cuda_event ready, done;  // the compute stream's work before it; its own end
    std::uint64_t ticket = 0;
    const char* op = "";
    bool on_compute = false;  // queued on the compute stream (no ready event)
  };
  struct scoped_device {
    explicit scoped_device(int d) { STRATA_CHECK_CUDA(cudaSetDevice(d)); }
  };

  ncclComm_t comm_;
  int device_;
  cudaStream_t compute_;
  std::string name_;
  std::chrono::duration<double> timeout_;
  scoped_device guard_;  // makes the device current before the stream and events below are made
  cuda_stream stream_;
  std::array<slot, ring> ring_;
  buffer<int, cuda> word_;
  int rank_ = 0, size_ = 1;
  std::uint64_t last_ = 0;
  std::uint64_t oldest_ = 1;  // no operation before it is unfinished
  runnable_clock clock_;      // since when the oldest unfinished one could run
  bool failed_ = false, comm_aborted_ = false;
  bool last_on_compute_ = false;
  std::array<const void*, 16> known_{};
  std::size_t next_known_ = 0;
  std::uint64_t watch_ = 0;
};

}  // namespace strata::detail
