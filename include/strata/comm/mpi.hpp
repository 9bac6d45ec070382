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
#include "detail/lane_comm.hpp"
#include "detail/mpi_exec.hpp"
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
class mpi_comm : public detail::lane_comm<mpi_comm, detail::mpi_task> {
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
    run_now(t);
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
  friend class detail::lane_comm<mpi_comm, detail::mpi_task>;
  template <class T>
  static detail::mpi_task task(detail::mpi_task::kind k, std::size_t count) {
    detail::mpi_task t;
    t.k = k;
    t.type = detail::mpi_type<T>();
    t.elem = sizeof(T);
    t.count = count;
    return t;
  }
  template <class T>
  static void set_reduce(detail::mpi_task& t, reduce_op op) {
    t.op = detail::mpi_op<T>(op);
  }
  // MPI delivers a message to oneself.
  void check_message(detail::mpi_task::kind, int) const {}
  // A blocking collective: on this thread when the lane is idle, else queued and waited for.
  void run_now(const detail::mpi_task& t) {
    auto& q = state().queue();
    if (!q.run_inline(t)) q.wait(q.submit(t));
  }

  std::unique_ptr<detail::mpi_state> s_;
};

namespace detail {
// Lets tests exercise the over-INT_MAX paths with small buffers.
struct mpi_testing {
  static void set_chunk(mpi_comm& c, std::size_t elements) { c.state().set_chunk(elements); }
};
}  // namespace detail

}  // namespace strata
