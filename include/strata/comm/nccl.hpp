// nccl_comm: the device communicator over NCCL, with mpi_comm's member API on buffers in
// device memory, run on its own stream that events order against the compute stream.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <unistd.h>  // gethostname

#include "../core/error.hpp"
#include "../space/cuda.hpp"
#include "comm_forms.hpp"
#include "communicator.hpp"
#include "detail/device_pointer.hpp"
#include "detail/lane.hpp"
#include "detail/nccl_pending.hpp"
#include "detail/nccl_state.hpp"
#include "detail/nccl_types.hpp"
#include "detail/rendezvous.hpp"
#include "detail/size_checks.hpp"
#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

namespace detail {

// This process's device_key for `device`: its node (name and boot id) and the device's PCI
// bus id. Nodes of one cluster have the same bus ids, and containers often the same host
// name; the kernel's boot id tells machines apart (NCCL's host hash uses it too), while
// containers on one machine share it, as they share its GPUs.
inline device_key gpu_key(int device) {
  char host[rendezvous_wire::node_bytes] = {}, bus[rendezvous_wire::device_bytes] = {};
  gethostname(host, sizeof host - 1);
  std::string node(host, strnlen(host, 38));  // with the boot id, within the key's 63 bytes
  std::string boot;
  if (std::ifstream in("/proc/sys/kernel/random/boot_id"); std::getline(in, boot)) {
    std::erase(boot, '-');
    node += " (boot " + boot.substr(0, 16) + ")";
  }
  STRATA_CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device));
  return {node, bus};
}

// NCCL needs one GPU per process; two ranks on the same device fail inside its init
// with "duplicate GPU". Each rank's device_key is gathered (collective) so that every
// rank throws the same config_error, naming both ranks, before that. (The bootstrap
// without MPI checks the same in its rendezvous.)
template <class HostComm>
void check_one_process_per_gpu(HostComm& host, int device, const std::string& name) {
  if (host.size() == 1) return;
  using rendezvous_wire::device_bytes, rendezvous_wire::node_bytes;
  std::array<std::uint8_t, node_bytes + device_bytes> mine{};
  rendezvous_wire::put_key(mine.data(), gpu_key(device));
  std::vector<std::uint8_t> all(mine.size() * static_cast<std::size_t>(host.size()));
  host.all_gather(std::span<const std::uint8_t>(mine), std::span<std::uint8_t>(all));
  std::vector<device_key> keys;
  for (int r = 0; r < host.size(); ++r)
    keys.push_back(rendezvous_wire::get_key(all.data() + static_cast<std::size_t>(r) * mine.size()));
  if (const auto shared = find_shared_device(keys))
    throw config_error(strata::cat(
        duplicate_gpu_message(name, shared->first, shared->second, keys[static_cast<std::size_t>(shared->first)]),
        " (this process sees ", cuda_device_count(), " device(s))"));
}

}  // namespace detail

struct nccl_options {
  // The stream that produces and consumes the buffers: every operation waits for the
  // work queued on it so far, and request::wait() makes it wait for the operation.
  // nullptr is the legacy default stream.
  cudaStream_t compute_stream = nullptr;
  // -1: the current device (bootstrap over a host communicator) or the device of
  // LOCAL_RANK (from_env); otherwise this device.
  int device = -1;
  std::string name = "nccl";
  // How long the init (every rank must reach it), a split, an operation's start and
  // synchronize() or barrier() wait before aborting; 0: STRATA_COMM_TIMEOUT or 300 s.
  std::chrono::duration<double> timeout{0.0};
};

// Buffers are device memory and belong to an *_async operation until its request
// completes. Operations run on the communicator's own stream in call order; wait()
// orders the compute stream after one without blocking the host, and synchronize()
// (or barrier()) blocks the host. NCCL has no tags: send/recv between two ranks match
// in the order they are issued, and a send to oneself needs send_recv (one group).
class nccl_comm : public comm_forms<nccl_comm> {
 public:
  // Collective over `host` (an mpi_comm or self_comm of the same processes): rank 0 makes
  // the ncclUniqueId and the host communicator broadcasts it.
  template <class HostComm>
  requires(!std::same_as<HostComm, nccl_comm>) && communicator<HostComm>
  explicit nccl_comm(HostComm& host, nccl_options opt = {}) {
    const int device = opt.device >= 0 ? opt.device : current_device();
    detail::check_one_process_per_gpu(host, device, opt.name);
    std::array<std::uint8_t, sizeof(ncclUniqueId)> id{};
    if (host.rank() == 0) {
      ncclUniqueId u;
      STRATA_CHECK_NCCL(ncclGetUniqueId(&u));
      std::memcpy(id.data(), &u, sizeof u);
    }
    host.broadcast(std::span<std::uint8_t>(id), 0);
    init(id.data(), host.rank(), host.size(), device, std::move(opt));
  }

  // Without MPI: the TCP rendezvous of MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and
  // LOCAL_RANK (the torchrun convention) carries the ncclUniqueId from rank 0, once every
  // rank has come and no two name the same GPU (a config_error on every rank).
  static nccl_comm from_env(nccl_options opt = {}) {
    const auto cfg = detail::rendezvous_config::from_env();
    const int device = opt.device >= 0 ? opt.device : device_for_local_rank(cfg.local_rank);
    std::array<std::byte, sizeof(ncclUniqueId)> id{};
    if (cfg.rank == 0) {
      device_guard g(device);  // the id records the device's host-side network interfaces
      ncclUniqueId u;
      STRATA_CHECK_NCCL(ncclGetUniqueId(&u));
      std::memcpy(id.data(), &u, sizeof u);
    }
    const auto got = detail::rendezvous_broadcast(cfg, id, detail::gpu_key(device), opt.name);
    expects<comm_error>(got.size() == sizeof(ncclUniqueId), [&] {
      return strata::cat("rendezvous: rank 0 sent ", got.size(), " bytes, an ncclUniqueId has ", sizeof(ncclUniqueId),
                         " (ranks built against different NCCL versions?)");
    });
    nccl_comm c;
    c.init(got.data(), cfg.rank, cfg.world_size, device, std::move(opt));
    return c;
  }

  nccl_comm(nccl_comm&&) noexcept = default;
  nccl_comm& operator=(nccl_comm&&) noexcept = default;
  ~nccl_comm() = default;

  int rank() const { return state().rank(); }
  int size() const { return state().size(); }
  int device() const { return state().device(); }
  ncclComm_t native() const { return state().comm(); }
  // The communication stream, and the compute stream it is ordered against.
  cudaStream_t stream() const { return state().stream(); }
  cudaStream_t compute_stream() const { return state().compute(); }
  void set_compute_stream(cudaStream_t s) { state().set_compute(s); }
  const std::string& name() const { return state().name(); }
  void set_name(std::string name) { state().set_name(std::move(name)); }
  std::chrono::duration<double> timeout() const { return state().timeout(); }
  void set_timeout(std::chrono::duration<double> t) { state().set_timeout(t); }

  // ---- asynchronous forms ----
  template <comm_element T>
  request all_reduce_async(std::span<T> data, reduce_op op = reduce_op::sum) {
    check_device_memory(data.data(), "all_reduce");
    return run("all_reduce", [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(data.data(), data.data(), data.size(), detail::nccl_type<T>(), detail::nccl_op(op), c, s);
    });
  }

  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request reduce_scatter_async(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    detail::check_reduce_scatter_sizes(in.size(), out.size(), size(), name());
    expects<comm_error>(!overlap(in, out) || out.empty(),
                        [&] { return strata::cat("reduce_scatter on ", name(), ": input and output overlap"); });
    check_device_memory(in.data(), "reduce_scatter");
    check_device_memory(out.data(), "reduce_scatter");
    return run("reduce_scatter", [&](ncclComm_t c, cudaStream_t s) {
      return ncclReduceScatter(in.data(), out.data(), out.size(), detail::nccl_type<T>(), detail::nccl_op(op), c, s);
    });
  }

  // `in` may be out's own block (out.subspan(rank() * in.size(), in.size())): gathered in place.
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_async(std::span<U> in, std::span<T> out) {
    detail::check_all_gather_sizes(in.size(), out.size(), size(), name());
    const T* own = out.data() + static_cast<std::size_t>(rank()) * in.size();
    expects<comm_error>(in.data() == own || !overlap(in, out), [&] {
      return strata::cat("all_gather on ", name(), ": input overlaps the output but is not block ", rank(), " of it");
    });
    check_device_memory(in.data(), "all_gather");
    check_device_memory(out.data(), "all_gather");
    return run("all_gather", [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data(), out.data(), in.size(), detail::nccl_type<T>(), c, s);
    });
  }

  // An all_gather whose own block starts in pinned host memory (ZeRO-3's offloaded
  // params): `in` is copied into out's block rank() on the communication stream, after
  // the compute stream's work as every operation is, and gathered in place. The copy is
  // part of the operation: it overlaps compute, and its time counts in the time-out.
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_from_host_async(std::span<U> in, std::span<T> out) {
    detail::check_all_gather_sizes(in.size(), out.size(), size(), name(), "all_gather_from_host");
    check_pinned_memory(in.data(), "all_gather_from_host");
    check_device_memory(out.data(), "all_gather_from_host");
    T* own = out.data() + static_cast<std::size_t>(rank()) * in.size();
    return run("all_gather_from_host", [&](ncclComm_t c, cudaStream_t s) {
      if (!in.empty() && cudaMemcpyAsync(own, in.data(), in.size_bytes(), cudaMemcpyHostToDevice, s) != cudaSuccess)
        return ncclUnhandledCudaError;
      return ncclAllGather(own, out.data(), in.size(), detail::nccl_type<T>(), c, s);
    });
  }

  template <comm_element T>
  request broadcast_async(std::span<T> data, int root) {
    check_rank(root, "broadcast root");
    check_device_memory(data.data(), "broadcast");
    return run("broadcast", [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(data.data(), data.data(), data.size(), detail::nccl_type<T>(), root, c, s);
    });
  }

  template <class U>
  requires comm_element<std::remove_const_t<U>>
  request send_async(std::span<U> data, int dest, int tag = 0) {
    check_peer(dest, "send destination");
    check_tag(tag);
    check_device_memory(data.data(), "send");
    return run("send", [&](ncclComm_t c, cudaStream_t s) {
      return ncclSend(data.data(), data.size(), detail::nccl_type<std::remove_const_t<U>>(), dest, c, s);
    });
  }

  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    check_peer(src, "recv source");
    check_tag(tag);
    check_device_memory(data.data(), "recv");
    return run("recv", [&](ncclComm_t c, cudaStream_t s) {
      return ncclRecv(data.data(), data.size(), detail::nccl_type<T>(), src, c, s);
    });
  }

  // A send to `dest` and a receive from `src` in one NCCL group, so two ranks that
  // exchange (pipeline stages, a ring step, or a rank with itself) cannot deadlock.
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request send_recv_async(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    check_rank(dest, "send destination");
    check_rank(src, "recv source");
    check_tag(tag);
    check_device_memory(out.data(), "send_recv");
    check_device_memory(in.data(), "send_recv");
    return run("send_recv", [&](ncclComm_t c, cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      if (r != ncclSuccess) return r;
      r = ncclSend(out.data(), out.size(), detail::nccl_type<T>(), dest, c, s);
      const ncclResult_t r2 = r == ncclSuccess ? ncclRecv(in.data(), in.size(), detail::nccl_type<T>(), src, c, s) : r;
      const ncclResult_t r3 = ncclGroupEnd();
      return r2 != ncclSuccess ? r2 : r3;
    });
  }

  // An all_reduce of one word: complete when every rank has reached it.
  request barrier_async() {
    int* word = state().barrier_word();
    return run("barrier",
               [&](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(word, word, 1, ncclInt32, ncclSum, c, s); });
  }

  // ---- blocking forms (comm_forms): queued, then the compute stream waits (the host does not) ----
  // For comm_forms: the operation `launch` queues goes on the compute stream itself, where
  // the wait that follows costs nothing: the same order as the communication stream and
  // an event each way, without their four CUDA calls (about 1 us a call on an H200).
  template <class Launch>
  void run_blocking(Launch& launch) {
    struct reset {
      bool& flag;
      ~reset() { flag = false; }  // also when launch() throws before it queued anything
    } r{on_compute_next_};
    on_compute_next_ = true;
    launch().wait();
  }
  // Blocks the host until every rank has reached the barrier (or the time-out aborts).
  // On the compute stream, as a blocking form: the operation after it then has no
  // communication-stream operation to wait for.
  void barrier() {
    auto launch = [&] { return barrier_async(); };
    run_blocking(launch);
    synchronize();
  }
  // Blocks the host until every operation queued so far has finished.
  void synchronize() { state().synchronize(); }

  // Collective: ranks with the same color form a communicator (ncclCommSplit), ordered
  // by key then rank. It shares this one's device, compute stream, time-out and mode.
  nccl_comm split(int color, int key) {
    expects<comm_error>(color >= 0,
                        [&] { return strata::cat("split of ", name(), ": color ", color, " must be >= 0"); });
    auto& s = state();
    s.check_async("split");
    device_guard g(s.device());
    ncclComm_t child = nullptr;
    const auto deadline = detail::deadline_in(s.timeout());
    ncclResult_t r = ncclCommSplit(s.comm(), color, key, &child, nullptr);
    // Non-blocking: the split runs as the parent's pending job, and NCCL fills in `child`
    // from its thread when that job ends (then the child's own state settles too).
    r = detail::nccl_settle(s.comm(), r, deadline);
    std::atomic_ref<ncclComm_t> filled(child);
    for (auto pause = std::chrono::microseconds(1); r == ncclSuccess && !filled.load();
         pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1))) {
      if (std::chrono::steady_clock::now() > deadline) r = ncclInProgress;
      std::this_thread::sleep_for(pause);
    }
    if (r == ncclSuccess) r = detail::nccl_settle(child, ncclInProgress, deadline);
    if (r != ncclSuccess)  // the parent's abort joins the split's job: only then is the child final
      s.fail("split", r, [&] {
        if (ncclComm_t made = filled.load()) (void)ncclCommAbort(made);
      });
    nccl_comm c;
    try {
      c.s_ = std::make_unique<detail::nccl_state>(child, s.device(), s.compute(), strata::cat(s.name(), "/", color),
                                                  s.timeout());
    } catch (...) {
      (void)ncclCommAbort(child);
      throw;
    }
    return c;
  }

 private:
  nccl_comm() = default;

  void init(const void* id_bytes, int rank, int size, int device, nccl_options opt) {
    ncclUniqueId id;
    std::memcpy(&id, id_bytes, sizeof id);
    device_guard g(device);
    const auto timeout =
        opt.timeout.count() > 0 ? detail::checked_comm_timeout(opt.timeout) : detail::default_comm_timeout();
    ncclComm_t comm = nullptr;
    ncclConfig_t config = detail::nccl_config();
    const auto deadline = detail::deadline_in(timeout);
    ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress && comm) (void)ncclCommAbort(comm);
    if (r == ncclInProgress) {  // non-blocking: every rank must come before the deadline
      r = detail::nccl_settle(comm, r, deadline);
      if (r != ncclSuccess) {
        std::string why =
            r == ncclInProgress
                ? strata::cat("did not finish within ", timeout.count(),
                              " s: a rank of the communicator never reached its init (it failed or was not started), "
                              "or the ranks cannot reach each other (NCCL_SOCKET_IFNAME chooses the interface; "
                              "STRATA_COMM_TIMEOUT sets the time-out)")
                : strata::cat("failed: ", detail::nccl_error_text(r, comm));
        (void)ncclCommAbort(comm);
        throw comm_error(strata::cat("nccl communicator ", opt.name, ": ncclCommInitRank (rank ", rank, " of ", size,
                                     ", device ", device, ") ", why));
      }
    }
    if (r != ncclSuccess)
      throw comm_error(strata::cat("nccl communicator ", opt.name, ": ncclCommInitRank (rank ", rank, " of ", size,
                                   ", device ", device, ") failed: ", detail::nccl_error_text(r)));
    try {
      s_ = std::make_unique<detail::nccl_state>(comm, device, opt.compute_stream, std::move(opt.name), timeout);
    } catch (...) {
      (void)ncclCommAbort(comm);  // a destroy would finalize with the other ranks: blocking
      throw;
    }
  }

  detail::nccl_state& state() const {
    expects<comm_error>(s_ != nullptr, "use of a moved-from strata::nccl_comm");
    return *s_;
  }

  // Queues one NCCL call on the communication stream after the compute stream's work, or
  // (a blocking form, run_blocking) on the compute stream itself.
  template <class Call>
  request run(const char* op, Call&& call) {
    auto& s = state();
    s.check_async(op);
    device_guard g(s.device());
    if (std::exchange(on_compute_next_, false)) {
      s.begin_on_compute();
      s.check(s.settle(call(s.comm(), s.compute()), op), op);
      return request(&s, s.finish_on_compute(op));
    }
    s.begin();
    s.check(s.settle(call(s.comm(), s.stream()), op), op);
    return request(&s, s.finish(op));
  }

  void check_rank(int r, const char* what) const {
    expects<comm_error>(r >= 0 && r < size(), [&] {
      return strata::cat(what, " ", r, " on ", name(), ": not a rank of a communicator of size ", size());
    });
  }
  void check_peer(int r, const char* what) const {
    check_rank(r, what);
    expects<comm_error>(r != rank(), [&] {
      return strata::cat(what, " ", r, " on ", name(),
                         " is this rank: NCCL needs both halves of a self-exchange in one group, use send_recv");
    });
  }
  void check_tag(int tag) const {
    expects<comm_error>(tag >= 0, [&] { return strata::cat("tag ", tag, " on ", name(), ": tags must be >= 0"); });
  }
  // NCCL reads and writes device memory only; a host pointer would fault inside a kernel.
  void check_device_memory(const void* p, const char* op) const {
    check_memory(p, op, false, "is not device memory; nccl_comm moves buffer<T, strata::cuda> data");
  }
  // A copy from pageable memory would block the host until the stream reaches it, where
  // no time-out is watched (space/cuda_transfer.hpp): host data comes from pinned memory.
  void check_pinned_memory(const void* p, const char* op) const {
    check_memory(p, op, true, "is not pinned host memory; give it buffer<T, strata::pinned> data");
  }
  void check_memory(const void* p, const char* op, bool pinned_host, const char* otherwise) const {
    // The same buffers come back every step: a pointer seen to be device memory is not
    // asked about again (cudaPointerGetAttributes costs about 0.2 us a call).
    if (!p || (!pinned_host && state().known_device_pointer(p))) return;
    detail::expect_memory_kind(p, op, name(), pinned_host, otherwise);
    if (!pinned_host) state().remember_device_pointer(p);
  }
  template <class A, class B>
  static bool overlap(std::span<A> a, std::span<B> b) {
    const auto* a0 = reinterpret_cast<const char*>(a.data());
    const auto* b0 = reinterpret_cast<const char*>(b.data());
    return a0 < b0 + b.size_bytes() && b0 < a0 + a.size_bytes();
  }

  std::unique_ptr<detail::nccl_state> s_;
  bool on_compute_next_ = false;  // run_blocking: the next run() queues on the compute stream
};

static_assert(communicator<nccl_comm>);

}  // namespace strata
