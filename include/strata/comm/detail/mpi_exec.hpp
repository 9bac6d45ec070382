// What an mpi_comm's lane executes: one plain descriptor per operation (no closures, so
// submitting allocates nothing) and the code that runs it on MPI, in chunks of at most INT_MAX.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "../../core/error.hpp"
#include "../mpi_types.hpp"
#include "comm_registry.hpp"
#include "hang_watch.hpp"
#include "lane.hpp"
#include "lane_report.hpp"
#include "reduce_math.hpp"

namespace strata::detail {

struct mpi_task {
  enum class kind : std::uint8_t {
    all_reduce,
    reduce_scatter,
    all_gather,
    broadcast,
    send,
    recv,
    barrier,
    split,
    free
  };
  kind k = kind::barrier;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t n = 0;      // elements per call: the whole buffer, or one rank's block
  std::size_t count = 0;  // elements the caller passed, for messages
  std::size_t elem = 0;   // bytes per element
  int peer = 0;           // root, destination or source
  int tag = 0;
  int color = 0, key = 0;
  MPI_Comm* result = nullptr;                         // split
  void (*finish)(void*, std::size_t, int) = nullptr;  // avg: divide by the size
};

constexpr const char* name_of(mpi_task::kind k) {
  switch (k) {
    case mpi_task::kind::all_reduce: return "all_reduce";
    case mpi_task::kind::reduce_scatter: return "reduce_scatter";
    case mpi_task::kind::all_gather: return "all_gather";
    case mpi_task::kind::broadcast: return "broadcast";
    case mpi_task::kind::send: return "send";
    case mpi_task::kind::recv: return "recv";
    case mpi_task::kind::barrier: return "barrier";
    case mpi_task::kind::split: return "split";
    case mpi_task::kind::free: return "free";
  }
  return "?";
}

inline bool mpi_finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

// The state behind one mpi_comm: its MPI communicator and its lane. Heap-allocated, so
// the lane thread's reference survives moves of the mpi_comm (and the registry's pointer).
class mpi_state final : public history_source {
 public:
  // Takes ownership of `comm` (already duplicated or split for strata's exclusive use).
  mpi_state(MPI_Comm comm, std::string name)
      : comm_(comm), name_(std::move(name)), lane_(*this, default_comm_timeout()) {
    // Errors come back as codes, which STRATA_CHECK_MPI turns into exceptions for the waiter.
    STRATA_CHECK_MPI(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    STRATA_CHECK_MPI(MPI_Comm_rank(comm_, &rank_));
    STRATA_CHECK_MPI(MPI_Comm_size(comm_, &size_));
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
    identify();
    comm_registry::get().add(this);
  }
  mpi_state(const mpi_state&) = delete;
  mpi_state& operator=(const mpi_state&) = delete;
  ~mpi_state() {
    mpi_task t;
    t.k = mpi_task::kind::free;
    try {
      lane_.wait(lane_.submit(t));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "strata: freeing communicator %s: %s\n", name_.c_str(), e.what());
    }
    comm_registry::get().remove(this);
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm comm() const { return comm_; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  std::size_t chunk() const { return chunk_; }
  void set_chunk(std::size_t c) { chunk_ = c; }
  lane<mpi_task, mpi_state>& queue() { return lane_; }

  // ---- the lane's executor interface ----
  static bool overlaps(const mpi_task& t) { return t.k == mpi_task::kind::send || t.k == mpi_task::kind::recv; }

  bool start(const mpi_task& t, std::size_t slot) {
    return with_context(t, [&] { return run(t, slot); });
  }

  bool poll(const mpi_task& t, std::size_t slot) {
    return with_context(t, [&] { return test_p2p(t, p2p_[slot]); });
  }

  // With an environment's hang watch, every rank's last operations are gathered first and
  // the diagnosis names the rank(s) the job waits for.
  [[noreturn, gnu::cold]] void timed_out(const mpi_task& t, double seconds) {
    const std::string line = cat("strata: rank ", world_rank_, ": ", name_of(t.k), " of ", t.count,
                                 " elements timed out after ", seconds, " s on ", name_);
    if (auto* w = hang_watch::active().load(std::memory_order_acquire)) w->timed_out(line, seconds);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    abort_job();
  }

  void traced(const mpi_task& t, std::uint64_t seq, std::int64_t start_ns, std::int64_t end_ns) {
    trace_lane_task(name_, t, seq, start_ns, end_ns);
  }

  [[gnu::cold]] comm_history history() override { return lane_history(lane_, name_, id_, members_, rank_); }

 private:
  struct p2p_slot {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status status[2]{};
    MPI_Datatype body = MPI_DATATYPE_NULL;
    int parts = 0;
  };

  std::string describe(const mpi_task& t) const {
    using k = mpi_task::kind;
    std::string d = cat(name_of(t.k), " of ", t.count, " elements");
    if (t.k == k::send) d += cat(" to rank ", t.peer, " tag ", t.tag);
    if (t.k == k::recv) d += cat(" from rank ", t.peer, " tag ", t.tag);
    return cat(d, " on ", name_, " (rank ", rank_, " of ", size_, ")");
  }

  template <class F>
  bool with_context(const mpi_task& t, F&& f) {
    try {
      return f();
    } catch (const comm_error& e) {
      throw comm_error(cat(describe(t), ": ", e.what()));
    }
  }

  // Who the members are in world ranks, and an id every member agrees on (rank 0's world
  // rank and its own count), so that dumps from different ranks match up. Before the
  // lane runs anything, so this call on the communicator is ordered before all others.
  [[gnu::cold]] void identify() {
    MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    STRATA_CHECK_MPI(MPI_Comm_group(comm_, &group));
    STRATA_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
    std::vector<int> local(static_cast<std::size_t>(size_));
    std::iota(local.begin(), local.end(), 0);
    members_.resize(local.size());
    STRATA_CHECK_MPI(MPI_Group_translate_ranks(group, size_, local.data(), world, members_.data()));
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    std::uint64_t id =
        rank_ == 0 ? (static_cast<std::uint64_t>(world_rank_) << 32) | comm_registry::get().next_local_id() : 0;
    STRATA_CHECK_MPI(MPI_Bcast(&id, 1, MPI_UINT64_T, 0, comm_));
    id_ = id;
  }

  bool test_p2p(const mpi_task& t, p2p_slot& s) {
    for (int i = 0; i < s.parts; ++i) {
      if (s.req[i] == MPI_REQUEST_NULL) continue;
      int flag = 0;
      // Some MPIs report truncation only in the status (not in MPI_Testall, not as the
      // return code), so each part is tested alone and its status kept.
      s.status[i].MPI_ERROR = MPI_SUCCESS;
      STRATA_CHECK_MPI(MPI_Test(&s.req[i], &flag, &s.status[i]));
      if (!flag) return false;
    }
    int got = 0;
    if (t.k == mpi_task::kind::recv) MPI_Get_count(&s.status[0], s.parts == 2 ? s.body : t.type, &got);
    if (s.body != MPI_DATATYPE_NULL) MPI_Type_free(&s.body);
    if (t.k == mpi_task::kind::recv) {
      // A shorter message than the buffer is an error too: the caller would read stale data.
      for (int i = 0; i < s.parts; ++i)
        expects<comm_error>(s.status[i].MPI_ERROR == MPI_SUCCESS,
                            [&] { return mpi_error_string(s.status[i].MPI_ERROR); });
      const std::size_t expected = s.parts == 2 ? t.n / chunk_ : t.n;
      expects<comm_error>(got >= 0 && static_cast<std::size_t>(got) == expected,
                          [&] { return "the message has a different number of elements"; });
    }
    return true;
  }

  // Calls f(offset, count) over [0, n) in pieces MPI's int counts can hold; at least once,
  // so a zero-length collective still takes part.
  template <class F>
  void chunks(std::size_t n, F&& f) const {
    std::size_t off = 0;
    do {
      const std::size_t m = std::min(chunk_, n - off);
      f(off, static_cast<int>(m));
      off += m;
    } while (off < n);
  }

  bool run(const mpi_task& t, std::size_t slot) {
    using k = mpi_task::kind;
    auto* out = static_cast<char*>(t.out);
    auto* in = static_cast<const char*>(t.in);
    const std::size_t e = t.elem;
    switch (t.k) {
      case k::all_reduce:
        chunks(t.n, [&](std::size_t off, int m) {
          STRATA_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, out + off * e, m, t.type, t.op, comm_));
        });
        if (t.finish) t.finish(t.out, t.n, size_);
        return true;
      case k::reduce_scatter:
        if (t.n <= chunk_ && t.n * static_cast<std::size_t>(size_) * e <= owner_reduce_bytes) {
          STRATA_CHECK_MPI(MPI_Reduce_scatter_block(in, out, static_cast<int>(t.n), t.type, t.op, comm_));
        } else {
          // A block beyond an int count, or a buffer beyond 128 KiB: reduce each block to
          // its owner. Open MPI's MPI_Reduce_scatter_block reduces the whole buffer onto
          // rank 0 and scatters it from there, so rank 0 holds two more copies of it (520 MiB
          // more for Qwen2.5-0.5B's embedding bucket in bf16) and carries all the traffic; a
          // reduce per owner holds one block, and measured 2-4x as fast from 256 KiB to
          // 64 MiB at 4 ranks (slower only below 64 KiB, where one call's latency wins).
          for (int r = 0; r < size_; ++r)
            chunks(t.n, [&](std::size_t off, int m) {
              STRATA_CHECK_MPI(MPI_Reduce(in + (r * t.n + off) * e, r == rank_ ? out + off * e : nullptr, m, t.type,
                                          t.op, r, comm_));
            });
        }
        if (t.finish) t.finish(t.out, t.n, size_);
        return true;
      case k::all_gather: {
        const bool in_place = in == out + rank_ * t.n * e;
        if (t.n <= chunk_) {
          const int n = static_cast<int>(t.n);
          STRATA_CHECK_MPI(MPI_Allgather(in_place ? MPI_IN_PLACE : in, n, t.type, out, n, t.type, comm_));
        } else {
          if (!in_place) std::memcpy(out + rank_ * t.n * e, in, t.n * e);
          for (int r = 0; r < size_; ++r)
            chunks(t.n, [&](std::size_t off, int m) {
              STRATA_CHECK_MPI(MPI_Bcast(out + (r * t.n + off) * e, m, t.type, r, comm_));
            });
        }
        return true;
      }
      case k::broadcast:
        chunks(t.n,
               [&](std::size_t off, int m) { STRATA_CHECK_MPI(MPI_Bcast(out + off * e, m, t.type, t.peer, comm_)); });
        return true;
      case k::send:
      case k::recv: post(t, p2p_[slot]); return test_p2p(t, p2p_[slot]);
      case k::barrier: STRATA_CHECK_MPI(MPI_Barrier(comm_)); return true;
      case k::split: STRATA_CHECK_MPI(MPI_Comm_split(comm_, t.color, t.key, t.result)); return true;
      case k::free:
        if (comm_ != MPI_COMM_NULL && !mpi_finalized()) STRATA_CHECK_MPI(MPI_Comm_free(&comm_));
        return true;
    }
    return true;
  }

  // A message over the int count limit goes as a body of chunk-sized blocks plus the rest;
  // both sides compute the same split from the element count.
  void post(const mpi_task& t, p2p_slot& s) {
    const bool send = t.k == mpi_task::kind::send;
    auto issue = [&](const void* p, int count, MPI_Datatype type, MPI_Request* r) {
      if (send)
        STRATA_CHECK_MPI(MPI_Isend(p, count, type, t.peer, t.tag, comm_, r));
      else
        STRATA_CHECK_MPI(MPI_Irecv(const_cast<void*>(p), count, type, t.peer, t.tag, comm_, r));
    };
    const void* base = send ? t.in : t.out;
    if (t.n <= chunk_) {
      s.parts = 1;
      issue(base, static_cast<int>(t.n), t.type, &s.req[0]);
      return;
    }
    const std::size_t blocks = t.n / chunk_, rest = t.n % chunk_;
    expects<comm_error>(blocks <= static_cast<std::size_t>(INT_MAX),
                        [&] { return cat("message of ", t.n, " elements is too large"); });
    STRATA_CHECK_MPI(MPI_Type_contiguous(static_cast<int>(chunk_), t.type, &s.body));
    STRATA_CHECK_MPI(MPI_Type_commit(&s.body));
    s.parts = 2;
    issue(base, static_cast<int>(blocks), s.body, &s.req[0]);
    issue(static_cast<const char*>(base) + blocks * chunk_ * t.elem, static_cast<int>(rest), t.type, &s.req[1]);
  }

  MPI_Comm comm_;
  std::string name_;
  int rank_ = 0, size_ = 1, world_rank_ = 0;
  std::uint64_t id_ = 0;
  std::vector<int> members_;  // world ranks
  std::size_t chunk_ = static_cast<std::size_t>(INT_MAX);
  // Reduce-scatters of more bytes than this go block by block (see run); smaller ones
  // stay one MPI call.
  static constexpr std::size_t owner_reduce_bytes = std::size_t{128} << 10;
  std::array<p2p_slot, lane_capacity> p2p_{};
  lane<mpi_task, mpi_state> lane_;  // last: its thread starts once everything above exists
};

}  // namespace strata::detail
