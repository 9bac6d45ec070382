// mpi_device_comm: a device communicator over MPI, with nccl_comm's member API on buffers
// in device memory. What it is for: several ranks sharing one GPU (which NCCL refuses), so
// that the device code that only runs at more than one rank can be tested on a machine
// with one GPU, and clusters without NCCL. STRATA_DEVICE_COMM=mpi chooses it for a
// trainer (comm/device_comm.hpp); NCCL stays the default.
//
// How: an operation first waits (on the host, with the time-out watch of wait_stream)
// for the work queued on the compute stream, then copies its input into pinned host
// memory, runs on its own mpi_comm (a split of the host communicator: same processes,
// traffic of its own, the lane's time-out), and its result is copied back onto the
// compute stream when its request is waited on, so the compute stream's later work sees
// it (the ordering nccl_comm gets from events). Where Open MPI reports CUDA support
// (MPIX_Query_cuda_support), the operations that only move data (all_gather, broadcast,
// send, recv) give MPI the device pointers themselves (an all_gather in place, its own
// block copied there on the device first), and a later operation on memory MPI still reads
// or writes waits for it; reductions always go through host memory, where MPI's and
// strata's own bf16/fp16 ops and avg's division run, so their results are the same bits
// either way. STRATA_MPI_CUDA_AWARE=0 turns the direct path off.
//
// Unlike NCCL it blocks the caller until the compute stream has caught up, so it overlaps
// communication with the host's work but not with the GPU's: a tool for correctness, and
// a working fallback, not a fast path.
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's MPIX_Query_cuda_support
#endif

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "../core/buffer.hpp"
#include "../core/error.hpp"
#include "../space/cuda.hpp"
#include "../space/cuda_stream.hpp"
#include "comm_forms.hpp"
#include "communicator.hpp"
#include "detail/device_pointer.hpp"
#include "detail/size_checks.hpp"
#include "mpi.hpp"
#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

struct mpi_device_options {
  // The stream that produces and consumes the buffers (see nccl_options).
  cudaStream_t compute_stream = nullptr;
  // -1: the current device.
  int device = -1;
  std::string name = "mpi_device";
};

namespace detail {

// Whether this MPI moves device memory itself: Open MPI's answer at run time, unless
// STRATA_MPI_CUDA_AWARE=0 says not to rely on it.
inline bool mpi_cuda_aware() {
  if (const char* v = std::getenv("STRATA_MPI_CUDA_AWARE"); v && std::string_view(v) == "0") return false;
#if defined(MPIX_CUDA_AWARE_SUPPORT) && MPIX_CUDA_AWARE_SUPPORT
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

// Pinned host blocks for staging, reused once nothing reads or writes one any more: an
// in-flight MPI operation holds its block, and a block whose copy back to the device is
// queued is free only once the compute stream has passed that copy (its event).
class staging_pool {
 public:
  struct block {
    buffer<std::byte, pinned> mem;
    cuda_event copied;  // the copy back that last read it
    bool busy = false;
  };

  block& acquire(std::size_t bytes) {
    for (auto& b : blocks_)
      if (!b.busy && b.mem.size() >= bytes && b.copied.done()) {
        b.busy = true;
        return b;
      }
    std::size_t size = std::size_t{1} << 16;
    while (size < bytes) size *= 2;
    block& b = blocks_.emplace_back(block{buffer<std::byte, pinned>(size), cuda_event(), true});
    return b;
  }

 private:
  std::deque<block> blocks_;  // stable addresses: requests in flight point into them
};

inline constexpr std::size_t staging_align = 256;
inline std::size_t align_up(std::size_t n) { return (n + staging_align - 1) / staging_align * staging_align; }

// What stands behind one mpi_device_comm: its MPI communicator, device, compute stream,
// staging, and the operations whose results still have to be copied back.
class mpi_device_state final : public request_source {
 public:
  mpi_device_state(mpi_comm host, int device, cudaStream_t compute)
      : host_(std::move(host)), device_(device), compute_(compute), cuda_aware_(mpi_cuda_aware()) {}
  mpi_device_state(const mpi_device_state&) = delete;
  mpi_device_state& operator=(const mpi_device_state&) = delete;
  ~mpi_device_state() {
    try {
      synchronize();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: device communicator %s: %s\n", host_.name().c_str(), e.what());
    }
  }

  mpi_comm& host() noexcept { return host_; }
  int device() const noexcept { return device_; }
  cudaStream_t compute() const noexcept { return compute_; }
  void set_compute(cudaStream_t s) noexcept { compute_ = s; }
  bool cuda_aware() const noexcept { return cuda_aware_; }

  // Device memory an operation in flight still reads, or writes.
  struct device_range {
    const std::byte* p = nullptr;
    std::size_t bytes = 0;
    bool writes = false;
    // Whether an access to [lo, lo + n) must wait for this one: they share a byte and one
    // of them writes (two reads of one buffer, two sends say, go together).
    bool conflicts(const std::byte* lo, std::size_t n, bool write) const {
      return (writes || write) && p && bytes && n && p < lo + n && lo < p + bytes;
    }
  };
  // An operation in flight: its host requests, the bytes to copy back into device memory
  // once they complete, and the device memory it touches until then: where its result
  // goes, and where CUDA-aware MPI reads and writes device buffers itself.
  struct pending {
    request first, second;
    void* device_dst = nullptr;
    const std::byte* staged = nullptr;
    std::size_t bytes = 0;
    staging_pool::block* blk = nullptr;
    device_range touched[2];
  };

  // Before an operation reads (or, with write, writes) [p, p + bytes) of device memory:
  // the earlier operations that conflict there are finished first (a copy back queued),
  // and the host waits for the compute stream's work so far, which may write its input.
  void prepare(const void* p, std::size_t bytes, bool write) {
    const auto* lo = static_cast<const std::byte*>(p);
    for (auto it = pending_.begin(); it != pending_.end();) {
      const auto& t = it->second.touched;
      if (t[0].conflicts(lo, bytes, write) || t[1].conflicts(lo, bytes, write)) {
        const std::uint64_t t = it->first;
        ++it;
        wait(t);
      } else {
        ++it;
      }
    }
    device_guard g(device_);
    wait_stream(compute_);
  }
  staging_pool::block& stage(std::size_t bytes) { return pool_.acquire(bytes); }
  // Queues device -> staging on the compute stream; the caller waits once for all of them.
  void copy_out(std::byte* to, const void* device_src, std::size_t bytes) {
    if (bytes) cuda::copy_async(to, device_src, bytes, compute_);
  }
  void wait_copies() {
    device_guard g(device_);
    wait_stream(compute_);
  }

  std::uint64_t track(pending p) {
    if (p.device_dst) p.touched[0] = {static_cast<const std::byte*>(p.device_dst), p.bytes, true};
    const std::uint64_t t = ++last_;
    pending_.emplace(t, std::move(p));
    return t;
  }

  bool test(std::uint64_t ticket) override {
    auto it = pending_.find(ticket);
    if (it == pending_.end()) return true;
    return it->second.first.test() && it->second.second.test();
  }
  // The host requests complete (errors rethrown), then the result goes back to the device
  // on the compute stream, ahead of the work queued there next.
  void wait(std::uint64_t ticket) override {
    auto it = pending_.find(ticket);
    if (it == pending_.end()) return;
    pending p = std::move(it->second);
    pending_.erase(it);
    struct release {
      staging_pool::block* b;
      ~release() {
        if (b) b->busy = false;
      }
    } r{p.blk};
    p.first.wait();
    p.second.wait();
    if (p.device_dst && p.bytes) {
      device_guard g(device_);
      cuda::copy_async(p.device_dst, p.staged, p.bytes, compute_);
      if (p.blk) p.blk->copied.record(compute_);
    }
  }

  // Every operation finished and copied back, and the compute stream past the copies.
  void synchronize() {
    while (!pending_.empty()) wait(pending_.begin()->first);
    device_guard g(device_);
    wait_stream(compute_);
  }

 private:
  mpi_comm host_;
  int device_;
  cudaStream_t compute_;
  bool cuda_aware_;
  staging_pool pool_;
  std::map<std::uint64_t, pending> pending_;  // by ticket: call order
  std::uint64_t last_ = 0;
};

}  // namespace detail

// Buffers are device memory and belong to an *_async operation until its request
// completes; wait() orders the compute stream after the result (the host may block
// until MPI is done), synchronize() or barrier() block the host. Tags as in MPI.
class mpi_device_comm : public comm_forms<mpi_device_comm> {
 public:
  // Collective over `host`: a communicator of the same processes with traffic of its own.
  explicit mpi_device_comm(mpi_comm& host, mpi_device_options opt = {})
      : mpi_device_comm(adopt_t{}, host.split(0, host.rank()), std::move(opt)) {}

  mpi_device_comm(mpi_device_comm&&) noexcept = default;
  mpi_device_comm& operator=(mpi_device_comm&&) noexcept = default;
  ~mpi_device_comm() = default;

  int rank() const { return state().host().rank(); }
  int size() const { return state().host().size(); }
  int device() const { return state().device(); }
  cudaStream_t compute_stream() const { return state().compute(); }
  void set_compute_stream(cudaStream_t s) { state().set_compute(s); }
  const std::string& name() const { return state().host().name(); }
  void set_name(std::string name) { state().host().set_name(std::move(name)); }
  std::chrono::duration<double> timeout() const { return state().host().timeout(); }
  void set_timeout(std::chrono::duration<double> t) { state().host().set_timeout(t); }
  // Whether data-only operations hand MPI the device pointers (see the top of this file).
  bool cuda_aware() const { return state().cuda_aware(); }

  // ---- asynchronous forms ----
  template <comm_element T>
  request all_reduce_async(std::span<T> data, reduce_op op = reduce_op::sum) {
    check_device_memory(data.data(), "all_reduce");
    auto& s = state();
    s.prepare(data.data(), data.size_bytes(), true);
    auto& blk = s.stage(data.size_bytes());
    s.copy_out(blk.mem.data(), data.data(), data.size_bytes());
    s.wait_copies();
    std::span<T> staged(reinterpret_cast<T*>(blk.mem.data()), data.size());
    return issue(s.host().all_reduce_async(staged, op), {}, data.data(), blk, 0, data.size_bytes());
  }

  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request reduce_scatter_async(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    detail::check_reduce_scatter_sizes(in.size(), out.size(), size(), name());
    check_device_memory(in.data(), "reduce_scatter");
    check_device_memory(out.data(), "reduce_scatter");
    auto& s = state();
    s.prepare(in.data(), in.size_bytes(), false);
    s.prepare(out.data(), out.size_bytes(), true);
    const std::size_t at = detail::align_up(in.size_bytes());
    auto& blk = s.stage(at + out.size_bytes());
    s.copy_out(blk.mem.data(), in.data(), in.size_bytes());
    s.wait_copies();
    std::span<const T> staged_in(reinterpret_cast<const T*>(blk.mem.data()), in.size());
    std::span<T> staged_out(reinterpret_cast<T*>(blk.mem.data() + at), out.size());
    return issue(s.host().reduce_scatter_async(staged_in, staged_out, op), {}, out.data(), blk, at, out.size_bytes());
  }

  // `in` may be out's own block (out.subspan(rank() * in.size(), in.size())): gathered in place.
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_async(std::span<U> in, std::span<T> out) {
    detail::check_all_gather_args(in, out, rank(), size(), name());
    check_device_memory(in.data(), "all_gather");
    check_device_memory(out.data(), "all_gather");
    auto& s = state();
    s.prepare(in.data(), in.size_bytes(), false);
    s.prepare(out.data(), out.size_bytes(), true);
    if (s.cuda_aware()) {
      // In place on the device: this rank's block copied into out first (the host
      // executor's own copy for blocks past int's counts would be a host memcpy).
      std::span<T> own = out.subspan(static_cast<std::size_t>(rank()) * in.size(), in.size());
      if (static_cast<const void*>(own.data()) != static_cast<const void*>(in.data()) && !in.empty()) {
        device_guard g(s.device());
        cuda::copy_async(own.data(), in.data(), in.size_bytes(), s.compute());
        s.wait_copies();
      }
      return issue_direct(s.host().all_gather_async(std::span<const T>(own), out), out.data(), out.size_bytes(), true);
    }
    auto& blk = s.stage(out.size_bytes());
    std::byte* own = blk.mem.data() + static_cast<std::size_t>(rank()) * in.size_bytes();
    s.copy_out(own, in.data(), in.size_bytes());
    s.wait_copies();
    return gather_staged<T>(s, blk, own, in.size(), out);
  }

  // An all_gather whose own block starts in pinned host memory (ZeRO-3's offloaded params).
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_from_host_async(std::span<U> in, std::span<T> out) {
    detail::check_all_gather_sizes(in.size(), out.size(), size(), name(), "all_gather_from_host");
    detail::expect_memory_kind(in.data(), "all_gather_from_host", name(), true,
                               "is not pinned host memory; give it buffer<T, strata::pinned> data");
    check_device_memory(out.data(), "all_gather_from_host");
    auto& s = state();
    s.prepare(out.data(), out.size_bytes(), true);  // also: the work that writes `in` has run
    auto& blk = s.stage(out.size_bytes());
    std::byte* own = blk.mem.data() + static_cast<std::size_t>(rank()) * in.size_bytes();
    if (!in.empty()) std::memcpy(own, in.data(), in.size_bytes());
    return gather_staged<T>(s, blk, own, in.size(), out);
  }

  template <comm_element T>
  request broadcast_async(std::span<T> data, int root) {
    check_rank(root, "broadcast root");
    check_device_memory(data.data(), "broadcast");
    auto& s = state();
    s.prepare(data.data(), data.size_bytes(), true);  // staged, the root's copy comes back too
    if (s.cuda_aware())
      return issue_direct(s.host().broadcast_async(data, root), data.data(), data.size_bytes(), rank() != root);
    auto& blk = s.stage(data.size_bytes());
    if (rank() == root) {
      s.copy_out(blk.mem.data(), data.data(), data.size_bytes());
      s.wait_copies();
    }
    std::span<T> staged(reinterpret_cast<T*>(blk.mem.data()), data.size());
    return issue(s.host().broadcast_async(staged, root), {}, data.data(), blk, 0, data.size_bytes());
  }

  template <class U>
  requires comm_element<std::remove_const_t<U>>
  request send_async(std::span<U> data, int dest, int tag = 0) {
    using T = std::remove_const_t<U>;
    check_rank(dest, "send destination");
    check_device_memory(data.data(), "send");
    auto& s = state();
    s.prepare(data.data(), data.size_bytes(), false);
    if (s.cuda_aware())
      return issue_direct(s.host().send_async(data, dest, tag), data.data(), data.size_bytes(), false);
    auto& blk = s.stage(data.size_bytes());
    s.copy_out(blk.mem.data(), data.data(), data.size_bytes());
    s.wait_copies();
    std::span<const T> staged(reinterpret_cast<const T*>(blk.mem.data()), data.size());
    return issue(s.host().send_async(staged, dest, tag), {}, nullptr, blk, 0, 0);
  }

  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    check_rank(src, "recv source");
    check_device_memory(data.data(), "recv");
    auto& s = state();
    s.prepare(data.data(), data.size_bytes(), true);
    if (s.cuda_aware()) return issue_direct(s.host().recv_async(data, src, tag), data.data(), data.size_bytes(), true);
    auto& blk = s.stage(data.size_bytes());
    std::span<T> staged(reinterpret_cast<T*>(blk.mem.data()), data.size());
    return issue(s.host().recv_async(staged, src, tag), {}, data.data(), blk, 0, data.size_bytes());
  }

  // A send to `dest` and a receive from `src` in flight together (a self-exchange too).
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request send_recv_async(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    check_rank(dest, "send destination");
    check_rank(src, "recv source");
    check_device_memory(out.data(), "send_recv");
    check_device_memory(in.data(), "send_recv");
    auto& s = state();
    s.prepare(out.data(), out.size_bytes(), false);
    s.prepare(in.data(), in.size_bytes(), true);
    const std::size_t at = detail::align_up(out.size_bytes());
    auto& blk = s.stage(at + in.size_bytes());
    s.copy_out(blk.mem.data(), out.data(), out.size_bytes());
    s.wait_copies();
    std::span<const T> staged_out(reinterpret_cast<const T*>(blk.mem.data()), out.size());
    std::span<T> staged_in(reinterpret_cast<T*>(blk.mem.data() + at), in.size());
    request r = s.host().recv_async(staged_in, src, tag);  // posted first: a self-exchange matches
    return issue(std::move(r), s.host().send_async(staged_out, dest, tag), in.data(), blk, at, in.size_bytes());
  }

  request barrier_async() { return issue(state().host().barrier_async(), {}); }

  // Blocks the host until every rank has reached the barrier (or the time-out aborts).
  void barrier() {
    barrier_async().wait();
    synchronize();
  }
  // Blocks the host until every operation so far has finished and its result is on the device.
  void synchronize() { state().synchronize(); }

  // Collective: ranks with the same color form a communicator, ordered by key then rank.
  // It shares this one's device and compute stream.
  mpi_device_comm split(int color, int key) {
    auto& s = state();
    return mpi_device_comm(adopt_t{}, s.host().split(color, key),
                           {s.compute(), s.device(), strata::cat(name(), "/", color)});
  }

 private:
  struct adopt_t {};
  mpi_device_comm(adopt_t, mpi_comm own, mpi_device_options opt) {
    const int device = opt.device >= 0 ? opt.device : current_device();
    own.set_name(std::move(opt.name));
    s_ = std::make_unique<detail::mpi_device_state>(std::move(own), device, opt.compute_stream);
  }

  detail::mpi_device_state& state() const {
    expects<comm_error>(s_ != nullptr, "use of a moved-from strata::mpi_device_comm");
    return *s_;
  }

  template <class T>
  request gather_staged(detail::mpi_device_state& s, detail::staging_pool::block& blk, std::byte* own, std::size_t n,
                        std::span<T> out) {
    std::span<const T> staged_own(reinterpret_cast<const T*>(own), n);
    std::span<T> staged(reinterpret_cast<T*>(blk.mem.data()), out.size());
    return issue(s.host().all_gather_async(staged_own, staged), {}, out.data(), blk, 0, out.size_bytes());
  }

  // A request for host requests whose result (bytes at staged + offset) goes to device_dst.
  request issue(request first, request second, void* device_dst = nullptr, detail::staging_pool::block* blk = nullptr,
                std::size_t offset = 0, std::size_t bytes = 0) {
    auto& s = state();
    detail::mpi_device_state::pending p;
    p.first = std::move(first);
    p.second = std::move(second);
    p.device_dst = device_dst;
    p.blk = blk;
    p.staged = blk ? blk->mem.data() + offset : nullptr;
    p.bytes = bytes;
    return request(&s, s.track(std::move(p)));
  }
  request issue(request first, request second, void* device_dst, detail::staging_pool::block& blk, std::size_t offset,
                std::size_t bytes) {
    return issue(std::move(first), std::move(second), device_dst, &blk, offset, bytes);
  }
  // A CUDA-aware operation: MPI itself reads (or, with write, writes) [p, p + bytes) of
  // device memory until it completes; nothing is copied back.
  request issue_direct(request r, const void* p, std::size_t bytes, bool write) {
    auto& s = state();
    detail::mpi_device_state::pending d;
    d.first = std::move(r);
    d.touched[1] = {static_cast<const std::byte*>(p), bytes, write};
    return request(&s, s.track(std::move(d)));
  }

  void check_rank(int r, const char* what) const {
    expects<comm_error>(r >= 0 && r < size(), [&] {
      return strata::cat(what, " ", r, " on ", name(), ": not a rank of a communicator of size ", size());
    });
  }
  void check_device_memory(const void* p, const char* op) const {
    detail::expect_memory_kind(p, op, name(), false,
                               "is not device memory; mpi_device_comm moves buffer<T, strata::cuda> data");
  }

  std::unique_ptr<detail::mpi_device_state> s_;
};

static_assert(communicator<mpi_device_comm>);

}  // namespace strata
