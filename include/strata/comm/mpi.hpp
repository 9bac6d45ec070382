// mpi_comm: the host communicator over MPI. It owns a duplicated MPI_Comm and one lane
// thread that runs queued operations in order, so *_async calls return at once.
#pragma once
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "../core/error.hpp"
#include "detail/mpi_exec.hpp"
#include "detail/size_checks.hpp"
#include "mpi_types.hpp"
#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

namespace detail {
struct mpi_testing;
}

// Buffers passed to an *_async call belong to the operation until its request completes.
// A blocking form behaves as its asynchronous form followed by wait(); when nothing is queued
// a blocking collective runs on the caller's thread, saving the hand-off to the lane (and
// the lane watches its time-out). Operations on one communicator run in call order, like a CUDA stream: consecutive
// sends and receives are in flight together (so a ring exchange can proceed), and a collective starts once everything
// queued before it completed. Requests must not outlive their communicator.
class mpi_comm {
 public:
  // Duplicates `parent` (collective over it), so strata's traffic never matches the user's.
  explicit mpi_comm(MPI_Comm parent, std::string name = "comm")
      : s_(std::make_unique<detail::mpi_state>(dup(parent), std::move(name))) {}
  mpi_comm(mpi_comm&&) noexcept = default;
  mpi_comm& operator=(mpi_comm&&) noexcept = default;
  ~mpi_comm() = default;

  int rank() const { return state().rank(); }
  int size() const { return state().size(); }
  // The duplicated communicator, for interop (e.g. an NCCL bootstrap). Calls on it from
  // other threads are not ordered with this communicator's lane.
  MPI_Comm native() const { return state().comm(); }
  const std::string& name() const { return state().name(); }
  void set_name(std::string name) { state().set_name(std::move(name)); }
  // How long one operation may run before the job is aborted (STRATA_COMM_TIMEOUT or 300 s).
  std::chrono::duration<double> timeout() const { return state().queue().timeout(); }
  void set_timeout(std::chrono::duration<double> t) { state().queue().set_timeout(t); }

  // ---- asynchronous forms: queued on the lane, return at once ----
  template <comm_element T>
  request all_reduce_async(std::span<T> data, reduce_op op = reduce_op::sum) {
    return submit(all_reduce_task(data, op));
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request reduce_scatter_async(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    return submit(reduce_scatter_task(in, out, op));
  }
  // `in` may be out's own block (out.subspan(rank() * in.size(), in.size())): gathered in place.
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_async(std::span<U> in, std::span<T> out) {
    return submit(all_gather_task(in, out));
  }
  template <comm_element T>
  request broadcast_async(std::span<T> data, int root) {
    return submit(broadcast_task(data, root));
  }
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  request send_async(std::span<U> data, int dest, int tag = 0) {
    return submit(p2p_task<std::remove_const_t<U>>(detail::mpi_task::kind::send, data.data(), data.size(), dest, tag));
  }
  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    return submit(p2p_task<T>(detail::mpi_task::kind::recv, data.data(), data.size(), src, tag));
  }
  request barrier_async() { return submit(barrier_task()); }

  // ---- blocking forms: the same operations, in the same order, done on return ----
  template <comm_element T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) {
    run(all_reduce_task(data, op));
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void reduce_scatter(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    run(reduce_scatter_task(in, out, op));
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void all_gather(std::span<U> in, std::span<T> out) {
    run(all_gather_task(in, out));
  }
  template <comm_element T>
  void broadcast(std::span<T> data, int root) {
    run(broadcast_task(data, root));
  }
  // Point-to-point goes through the lane even when blocking: it is posted there, so a
  // receive queued before it and the matching traffic can all be in flight together.
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  void send(std::span<U> data, int dest, int tag = 0) {
    send_async(data, dest, tag).wait();
  }
  template <comm_element T>
  void recv(std::span<T> data, int src, int tag = 0) {
    recv_async(data, src, tag).wait();
  }
  void barrier() { run(barrier_task()); }

  // Collective: ranks with the same color form a communicator, ordered by key then rank.
  mpi_comm split(int color, int key) {
    expects<comm_error>(color >= 0,
                        [&] { return strata::cat("split of ", name(), ": color ", color, " must be >= 0"); });
    MPI_Comm result = MPI_COMM_NULL;
    detail::mpi_task t;
    t.k = detail::mpi_task::kind::split;
    t.color = color;
    t.key = key;
    t.result = &result;
    run(t);
    return mpi_comm(adopt_t{}, result, strata::cat(name(), "/", color));
  }

 private:
  friend struct detail::mpi_testing;
  struct adopt_t {};
  mpi_comm(adopt_t, MPI_Comm owned, std::string name)
      : s_(std::make_unique<detail::mpi_state>(owned, std::move(name))) {}

  static MPI_Comm dup(MPI_Comm parent) {
    MPI_Comm c = MPI_COMM_NULL;
    STRATA_CHECK_MPI(MPI_Comm_dup(parent, &c));
    return c;
  }
  detail::mpi_state& state() const {
    expects<comm_error>(s_ != nullptr, [&] { return "use of a moved-from strata::mpi_comm"; });
    return *s_;
  }
  template <class T>
  detail::mpi_task task(detail::mpi_task::kind k, std::size_t count) const {
    detail::mpi_task t;
    t.k = k;
    t.type = detail::mpi_type<T>();
    t.elem = sizeof(T);
    t.count = count;
    return t;
  }
  // Arguments are checked here, on the caller's thread, before anything is queued.
  template <class T>
  detail::mpi_task all_reduce_task(std::span<T> data, reduce_op op) const {
    auto t = task<T>(detail::mpi_task::kind::all_reduce, data.size());
    t.out = data.data();
    t.n = data.size();
    t.op = detail::mpi_op<T>(op);
    if (op == reduce_op::avg) t.finish = &detail::divide_by_size<T>;
    return t;
  }
  template <class U, class T>
  detail::mpi_task reduce_scatter_task(std::span<U> in, std::span<T> out, reduce_op op) const {
    detail::check_reduce_scatter_args(in, out, size(), name());
    auto t = task<T>(detail::mpi_task::kind::reduce_scatter, in.size());
    t.in = in.data();
    t.out = out.data();
    t.n = out.size();
    t.op = detail::mpi_op<T>(op);
    if (op == reduce_op::avg) t.finish = &detail::divide_by_size<T>;
    return t;
  }
  template <class U, class T>
  detail::mpi_task all_gather_task(std::span<U> in, std::span<T> out) const {
    detail::check_all_gather_args(in, out, rank(), size(), name());
    auto t = task<T>(detail::mpi_task::kind::all_gather, out.size());
    t.in = in.data();
    t.out = out.data();
    t.n = in.size();
    return t;
  }
  template <class T>
  detail::mpi_task broadcast_task(std::span<T> data, int root) const {
    check_rank(root, "broadcast root");
    auto t = task<T>(detail::mpi_task::kind::broadcast, data.size());
    t.out = data.data();
    t.n = data.size();
    t.peer = root;
    return t;
  }
  template <class T>
  detail::mpi_task p2p_task(detail::mpi_task::kind k, const T* data, std::size_t n, int peer, int tag) const {
    check_rank(peer, k == detail::mpi_task::kind::send ? "send destination" : "recv source");
    detail::check_tag(tag, name());
    auto t = task<T>(k, n);
    if (k == detail::mpi_task::kind::send)
      t.in = data;
    else
      t.out = const_cast<T*>(data);
    t.n = n;
    t.peer = peer;
    t.tag = tag;
    return t;
  }
  static detail::mpi_task barrier_task() {
    detail::mpi_task t;
    t.k = detail::mpi_task::kind::barrier;
    return t;
  }
  request submit(const detail::mpi_task& t) {
    auto& q = state().queue();
    return request(&q, q.submit(t));
  }
  // A blocking collective: on this thread when the lane is idle, else queued and waited for.
  void run(const detail::mpi_task& t) {
    auto& q = state().queue();
    if (!q.run_inline(t)) q.wait(q.submit(t));
  }
  void check_rank(int r, const char* what) const { detail::check_peer(r, size(), what, name()); }

  std::unique_ptr<detail::mpi_state> s_;
};

namespace detail {
// Lets tests exercise the over-INT_MAX paths with small buffers.
struct mpi_testing {
  static void set_chunk(mpi_comm& c, std::size_t elements) { c.state().set_chunk(elements); }
};
}  // namespace detail

}  // namespace strata
