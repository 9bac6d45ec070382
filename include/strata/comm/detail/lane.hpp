// lane: one background thread that runs a communicator's operations in submission order,
// like a CUDA stream, so the caller's compute proceeds while communication is in flight.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "../../core/error.hpp"
#include "../../core/trace.hpp"
#include "../request.hpp"
#include "time_out.hpp"

namespace strata::detail {

// Operations a communicator may have queued before a submitter waits for room.
inline constexpr std::size_t lane_capacity = 64;

// Exec supplies, for an immutable Task (written once at submit):
//   bool start(const Task&, std::size_t slot)  runs the task, or posts it and returns false
//   bool poll(const Task&, std::size_t slot)   for a posted task: true once it completed
//   static bool overlaps(const Task&)          may be posted while earlier posted tasks are
//                                              in flight (point-to-point; a collective waits)
//   void timed_out(const Task&, double s)      called on a waiting thread; normally aborts
//   void traced(const Task&, seq, start, end)  records a finished task while tracing
// Tasks complete, and tickets are published, in submission order. The ring is fixed, so
// submitting allocates nothing; a full ring makes the submitter wait, as a full stream does.
template <class Task, class Exec>
class lane final : public request_source {
 public:
  static constexpr std::size_t capacity = lane_capacity;
  using clock = std::chrono::steady_clock;

  lane(Exec& exec, std::chrono::duration<double> timeout) : exec_(exec) {
    set_timeout(timeout);
    thread_ = std::thread([this] { loop(); });
  }
  lane(const lane&) = delete;
  lane& operator=(const lane&) = delete;
  // Runs what is queued, then stops.
  ~lane() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    work_cv_.notify_one();
    thread_.join();
  }

  static constexpr std::size_t slot_of(std::uint64_t ticket) { return (ticket - 1) % capacity; }

  std::uint64_t submit(const Task& task) {
    std::uint64_t ticket;
    {
      std::unique_lock lk(m_);
      if (submitted_ - completed_.load(std::memory_order_relaxed) >= capacity)
        done_cv_.wait(lk, [&] { return submitted_ - completed_.load(std::memory_order_relaxed) < capacity; });
      ticket = submitted_ + 1;
      ring_[slot_of(ticket)] = task;
      record_submit(ticket, task);
      submitted_ = ticket;
      submitted_seen_.store(ticket, std::memory_order_release);
    }
    work_cv_.notify_one();
    return ticket;
  }

  // Runs a task on the calling thread if nothing is queued or running, and says whether it
  // did. It takes the next ticket, so order is kept: tasks submitted meanwhile wait for it,
  // and the idle lane thread watches its time-out. A blocking call saves the two thread
  // wake-ups of a hand-off (about 13 us here, 5% of a 1 MiB all_reduce). Errors propagate.
  bool run_inline(const Task& task) {
    if (Exec::overlaps(task)) return false;  // a posted task completes later, on the lane
    std::uint64_t ticket;
    {
      std::lock_guard lk(m_);
      if (inline_active_ || submitted_ != completed_.load(std::memory_order_relaxed)) return false;
      ticket = ++submitted_;
      ring_[slot_of(ticket)] = task;
      record_submit(ticket, task);
      started_at_[slot_of(ticket)].store(clock::now().time_since_epoch().count());
      started_.store(ticket, std::memory_order_release);
      inline_active_ = true;
    }
    struct finish {
      lane& l;
      std::uint64_t ticket;
      ~finish() {
        bool queued;
        {
          std::lock_guard lk(l.m_);
          l.ended_at_[slot_of(ticket)].store(clock::now().time_since_epoch().count(), std::memory_order_relaxed);
          if (lane_ops_observed()) l.trace(ticket);
          l.completed_.store(ticket, std::memory_order_release);
          l.submitted_seen_.store(l.submitted_, std::memory_order_release);
          l.inline_active_ = false;
          queued = l.submitted_ > ticket;
        }
        if (queued) l.work_cv_.notify_one();  // waking an idle lane for nothing costs a core's time
        l.done_cv_.notify_all();
      }
    } f{*this, ticket};
    exec_.start(ring_[slot_of(ticket)], slot_of(ticket));
    return true;
  }
  bool test(std::uint64_t ticket) override { return completed_.load(std::memory_order_acquire) >= ticket; }

  void wait(std::uint64_t ticket) override {
    if (completed_.load(std::memory_order_acquire) < ticket) wait_slow(ticket);
    if (error_count_.load(std::memory_order_acquire) == 0) return;
    std::exception_ptr e;
    {
      std::lock_guard lk(m_);
      if (auto it = errors_.find(ticket); it != errors_.end()) {
        e = it->second;
        errors_.erase(it);
        error_count_.fetch_sub(1, std::memory_order_release);
      }
    }
    if (e) std::rethrow_exception(e);
  }

  void set_timeout(std::chrono::duration<double> t) {
    t = checked_comm_timeout(t);
    {
      std::lock_guard lk(m_);  // so that the lane's next timed sleep uses the new value
      timeout_ns_.store(std::chrono::duration_cast<std::chrono::nanoseconds>(t).count(), std::memory_order_relaxed);
    }
    work_cv_.notify_one();
  }
  std::chrono::duration<double> timeout() const {
    return std::chrono::nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
  }

  // The operations still in the ring (the last `capacity`), oldest first, for a hang
  // report: f(ticket, seq, task, enqueued, started, ended), where seq numbers the
  // collectives (0 for a point-to-point task) and a time not yet reached is nullptr.
  struct totals {
    std::uint64_t submitted, completed, collectives;
  };
  template <class F>
  totals history(F&& f) {
    std::lock_guard lk(m_);  // no submit can reuse a slot meanwhile
    const std::uint64_t started = started_.load(std::memory_order_acquire);
    const std::uint64_t completed = completed_.load(std::memory_order_acquire);
    for (std::uint64_t t = submitted_ > capacity ? submitted_ - capacity + 1 : 1; t <= submitted_; ++t) {
      const std::size_t s = slot_of(t);
      const auto at = [](clock::rep r) { return clock::time_point(clock::duration(r)); };
      const clock::time_point enq = at(enqueued_at_[s]), st = at(started_at_[s].load()), end = at(ended_at_[s].load());
      f(t, seq_[s], ring_[s], enq, t <= started ? &st : nullptr, t <= completed ? &end : nullptr);
    }
    return {submitted_, completed, collectives_};
  }

 private:
  // Waiters and the idle lane block in the kernel rather than spin: where ranks outnumber
  // cores, a spinning thread takes the core that the peer's lane needs (measured on 2 cores,
  // 2 ranks: a 20 us spin made a 4 KiB all_reduce three times slower).
  void wait_slow(std::uint64_t ticket) {
    std::unique_lock lk(m_);
    while (completed_.load(std::memory_order_acquire) < ticket) {
      const std::uint64_t oldest = completed_.load(std::memory_order_acquire) + 1;
      const auto limit = std::chrono::nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
      if (started_.load(std::memory_order_acquire) < oldest) {
        // Not started yet: the lane is about to pick it up; its clock starts then.
        done_cv_.wait_for(lk, limit);
        continue;
      }
      const auto deadline = clock::time_point(clock::duration(started_at_[slot_of(oldest)].load())) + limit;
      if (clock::now() < deadline) {
        done_cv_.wait_until(lk, deadline);
        continue;
      }
      if (reported_ != oldest) {
        reported_ = oldest;
        const Task stuck = ring_[slot_of(oldest)];
        lk.unlock();
        exec_.timed_out(stuck, std::chrono::duration<double>(limit).count());
        lk.lock();
      } else {
        done_cv_.wait_for(lk, limit);
      }
    }
  }

  void loop() {
    std::uint64_t started = 0, completed = 0;
    int idle_polls = 0;
    std::array<bool, capacity> done{};
    for (;;) {
      std::uint64_t available;
      if (started == completed) {
        // Idle: wait for work, catch up with tasks callers ran themselves, and watch the
        // time-out of one running on a caller's thread (nobody else can).
        std::unique_lock lk(m_);
        for (;;) {
          if (!inline_active_ && submitted_ > completed_.load(std::memory_order_relaxed)) break;
          if (!inline_active_ && stop_) return;
          const auto limit = std::chrono::nanoseconds(timeout_ns_.load(std::memory_order_relaxed));
          if (!inline_active_) {
            // Not woken when a caller starts running a task itself (that would cost the
            // caller a system call): a lane asleep since before it wakes by then + limit/2,
            // still ahead of the task's deadline.
            work_cv_.wait_for(lk, limit / 2);
            continue;
          }
          const std::uint64_t t = started_.load(std::memory_order_relaxed);
          const auto deadline = clock::time_point(clock::duration(started_at_[slot_of(t)].load())) + limit;
          if (clock::now() < deadline) {
            work_cv_.wait_until(lk, deadline);
          } else if (reported_ != t) {
            reported_ = t;
            const Task stuck = ring_[slot_of(t)];
            lk.unlock();
            exec_.timed_out(stuck, std::chrono::duration<double>(limit).count());
            lk.lock();
          } else {
            work_cv_.wait_for(lk, limit);
          }
        }
        started = completed = completed_.load(std::memory_order_relaxed);
        available = submitted_;
      } else {
        available = submitted_seen_.load(std::memory_order_acquire);
      }
      bool progressed = false;
      if (started < available) {
        const std::uint64_t t = started + 1;
        const Task& task = ring_[slot_of(t)];
        if (started == completed || Exec::overlaps(task)) {
          started_at_[slot_of(t)].store(clock::now().time_since_epoch().count());
          started_.store(t, std::memory_order_release);
          started = t;
          done[slot_of(t)] = run([&] { return exec_.start(task, slot_of(t)); }, t);
          progressed = true;
        }
      }
      for (std::uint64_t t = completed + 1; t <= started; ++t)
        if (!done[slot_of(t)]) done[slot_of(t)] = run([&] { return exec_.poll(ring_[slot_of(t)], slot_of(t)); }, t);
      const std::uint64_t before = completed;
      while (completed < started && done[slot_of(completed + 1)]) done[slot_of(++completed)] = false;
      if (completed != before) {
        const auto now = clock::now().time_since_epoch().count();
        for (std::uint64_t t = before + 1; t <= completed; ++t) {
          ended_at_[slot_of(t)].store(now, std::memory_order_relaxed);
          if (lane_ops_observed()) trace(t);
        }
        {
          std::lock_guard lk(m_);
          completed_.store(completed, std::memory_order_release);
        }
        done_cv_.notify_all();
        progressed = true;
      }
      // Posted point-to-point operations are in flight and nothing else can start. Poll
      // hard for a moment (a reply is often close), then at most every 50 us so that a
      // receive posted long before its send does not take a core from the caller's compute.
      if (progressed) {
        idle_polls = 0;
      } else if (++idle_polls < 200) {
        std::this_thread::yield();
      } else {
        std::unique_lock lk(m_);
        const std::uint64_t seen = submitted_;  // wake early only for something new
        work_cv_.wait_for(lk, std::chrono::microseconds(50), [&] { return submitted_ > seen; });
      }
    }
  }

  // The ticket's task, finished: its slot is not reused before completed_ passes it.
  void trace(std::uint64_t ticket) {
    const std::size_t s = slot_of(ticket);
    const auto ns = [](clock::rep r) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(clock::duration(r)).count();
    };
    exec_.traced(ring_[s], seq_[s], ns(started_at_[s].load()), ns(ended_at_[s].load()));
  }

  // Called under m_ as a task takes its ticket.
  void record_submit(std::uint64_t ticket, const Task& task) {
    enqueued_at_[slot_of(ticket)] = clock::now().time_since_epoch().count();
    seq_[slot_of(ticket)] = Exec::overlaps(task) ? 0 : ++collectives_;
  }

  // An error completes the task; it is kept for the one request that waits on it.
  template <class F>
  bool run(F&& f, std::uint64_t ticket) {
    try {
      return f();
    } catch (...) {
      std::lock_guard lk(m_);
      errors_[ticket] = std::current_exception();
      error_count_.fetch_add(1, std::memory_order_release);
      return true;
    }
  }

  Exec& exec_;
  std::mutex m_;
  std::condition_variable work_cv_, done_cv_;
  std::array<Task, capacity> ring_{};
  std::array<std::atomic<clock::rep>, capacity> started_at_{};
  std::array<std::atomic<clock::rep>, capacity> ended_at_{};
  // Written under m_ before the ticket is published (so the lane reads them after its
  // acquire of submitted_seen_ without m_).
  std::array<clock::rep, capacity> enqueued_at_{};
  std::array<std::uint64_t, capacity> seq_{};
  std::uint64_t collectives_ = 0;                 // guarded by m_
  std::uint64_t submitted_ = 0;                   // guarded by m_
  std::atomic<std::uint64_t> submitted_seen_{0};  // the same, readable by the lane without m_
  std::atomic<std::uint64_t> started_{0};
  std::atomic<std::uint64_t> completed_{0};
  std::atomic<std::int64_t> timeout_ns_{0};
  std::uint64_t reported_ = 0;  // guarded by m_: the ticket whose time-out was reported
  std::map<std::uint64_t, std::exception_ptr> errors_;
  std::atomic<int> error_count_{0};
  bool stop_ = false;
  bool inline_active_ = false;  // guarded by m_: a caller is running the ticket started_
  std::thread thread_;
};

}  // namespace strata::detail
