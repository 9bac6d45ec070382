// comm_forms: the blocking forms of a communicator's operations, written once over its
// asynchronous forms. A backend implements rank(), size() and the *_async primitives
// (and send_recv_async where it has one); deriving from comm_forms<Backend> gives it
// all_reduce, reduce_scatter, all_gather, broadcast, send, recv and send_recv, each the
// asynchronous form followed by request::wait(). A backend that can do better when the
// wait follows at once (NCCL: queue the operation on the compute stream itself, saving
// the two event hops to a communication stream) offers run_blocking(launch), which calls
// launch() in that mode and waits. A backend that blocks differently (a single process's
// recv, which cannot wait for a send that nobody else will post) declares its own form,
// which hides this one.
#pragma once
#include <span>
#include <type_traits>

#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

template <class Backend>
class comm_forms {
 public:
  template <comm_element T>
  void all_reduce(std::span<T> data, reduce_op op = reduce_op::sum) {
    complete([&] { return self().all_reduce_async(data, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void reduce_scatter(std::span<U> in, std::span<T> out, reduce_op op = reduce_op::sum) {
    complete([&] { return self().reduce_scatter_async(in, out, op); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void all_gather(std::span<U> in, std::span<T> out) {
    complete([&] { return self().all_gather_async(in, out); });
  }
  template <comm_element T>
  void broadcast(std::span<T> data, int root) {
    complete([&] { return self().broadcast_async(data, root); });
  }
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  void send(std::span<U> data, int dest, int tag = 0) {
    complete([&] { return self().send_async(data, dest, tag); });
  }
  template <comm_element T>
  void recv(std::span<T> data, int src, int tag = 0) {
    complete([&] { return self().recv_async(data, src, tag); });
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  void send_recv(std::span<U> out, int dest, std::span<T> in, int src, int tag = 0) {
    complete([&] { return self().send_recv_async(out, dest, in, src, tag); });
  }

 protected:
  comm_forms() = default;
  ~comm_forms() = default;

 private:
  Backend& self() { return static_cast<Backend&>(*this); }
  template <class Launch>
  void complete(Launch&& launch) {
    if constexpr (requires(Backend& b, Launch& l) { b.run_blocking(l); })
      self().run_blocking(launch);
    else
      launch().wait();
  }
};

}  // namespace strata
