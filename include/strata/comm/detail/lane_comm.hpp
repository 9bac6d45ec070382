// lane_comm: the operations of a host communicator whose work runs on a lane (mpi_comm,
// gloo_comm), written once over its task type. Each operation's arguments are checked on
// the caller's thread and become one Task; the asynchronous form queues it on the lane,
// the blocking form hands it to the backend's run_now(Task) (the lane's submit and wait, or
// mpi_comm's: on the caller's thread when the lane is idle).
//
// Backend provides, to this class as a friend: state() (with queue(), the lane),
// rank(), size(), name(); task<T>(kind, count), a Task of T's element bytes (and
// type, where the backend needs it); set_reduce<T>(Task&, reduce_op);
// check_message(kind, peer), its own rules for a send or receive; and run_now(const
// Task&), its blocking run (submit(t).wait() at the least). Each is required, not
// detected: a hook misspelt must not be skipped silently.
#pragma once
#include <cstddef>
#include <span>
#include <type_traits>

#include "../reduce_op.hpp"
#include "../request.hpp"
#include "reduce_math.hpp"
#include "size_checks.hpp"

namespace strata::detail {

template <class Backend, class Task>
class lane_comm {
 public:
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
    return submit(message_task<std::remove_const_t<U>>(Task::kind::send, data.data(), data.size(), dest, tag));
  }
  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    return submit(message_task<T>(Task::kind::recv, data.data(), data.size(), src, tag));
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
  // A send or receive goes through the lane even when blocking: it is posted there, so a
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

 protected:
  lane_comm() = default;
  ~lane_comm() = default;

 private:
  Backend& self() { return static_cast<Backend&>(*this); }
  const Backend& self() const { return static_cast<const Backend&>(*this); }

  template <class T>
  Task all_reduce_task(std::span<T> data, reduce_op op) const {
    auto t = Backend::template task<T>(Task::kind::all_reduce, data.size());
    t.out = data.data();
    t.n = data.size();
    reduction<T>(t, op);
    return t;
  }
  template <class U, class T>
  Task reduce_scatter_task(std::span<U> in, std::span<T> out, reduce_op op) const {
    check_reduce_scatter_args(in, out, self().size(), self().name());
    auto t = Backend::template task<T>(Task::kind::reduce_scatter, in.size());
    t.in = in.data();
    t.out = out.data();
    t.n = out.size();
    reduction<T>(t, op);
    return t;
  }
  template <class U, class T>
  Task all_gather_task(std::span<U> in, std::span<T> out) const {
    check_all_gather_args(in, out, self().rank(), self().size(), self().name());
    auto t = Backend::template task<T>(Task::kind::all_gather, out.size());
    t.in = in.data();
    t.out = out.data();
    t.n = in.size();
    return t;
  }
  template <class T>
  Task broadcast_task(std::span<T> data, int root) const {
    check_rank(root, "broadcast root");
    auto t = Backend::template task<T>(Task::kind::broadcast, data.size());
    t.out = data.data();
    t.n = data.size();
    t.peer = root;
    return t;
  }
  template <class T>
  Task message_task(typename Task::kind k, const T* data, std::size_t n, int peer, int tag) const {
    check_rank(peer, k == Task::kind::send ? "send destination" : "recv source");
    check_tag(tag, self().name());
    self().check_message(k, peer);
    auto t = Backend::template task<T>(k, n);
    if (k == Task::kind::send)
      t.in = data;
    else
      t.out = const_cast<T*>(data);
    t.n = n;
    t.peer = peer;
    t.tag = tag;
    return t;
  }
  static Task barrier_task() {
    Task t;
    t.k = Task::kind::barrier;
    return t;
  }
  template <class T>
  static void reduction(Task& t, reduce_op op) {
    Backend::template set_reduce<T>(t, op);
    if (op == reduce_op::avg) t.finish = &divide_by_size<T>;
  }
  void check_rank(int r, const char* what) const { check_peer(r, self().size(), what, self().name()); }
  void run(const Task& t) { self().run_now(t); }

 protected:
  request submit(const Task& t) {
    auto& q = self().state().queue();
    return request(&q, q.submit(t));
  }
};

}  // namespace strata::detail
