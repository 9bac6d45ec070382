// request: the move-only handle of an asynchronous communication. Waiting on it makes the
// caller's view of the buffers current; an error raised while the operation ran is rethrown.
#pragma once
#include <cstdint>
#include <cstdio>
#include <exception>
#include <utility>

#include "../core/trace.hpp"

namespace strata {

namespace detail {
// What a request waits on: a lane (tickets complete in order) or a backend's own queue.
class request_source {
 public:
  virtual bool test(std::uint64_t ticket) = 0;
  // Returns once the ticket completed; rethrows the error its operation raised, once.
  virtual void wait(std::uint64_t ticket) = 0;

 protected:
  ~request_source() = default;
};
}  // namespace detail

class request {
 public:
  // A request that is already complete (what synchronous backends return).
  request() = default;
  request(detail::request_source* source, std::uint64_t ticket) noexcept : source_(source), ticket_(ticket) {}
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  request(request&& o) noexcept : source_(std::exchange(o.source_, nullptr)), ticket_(o.ticket_) {}
  request& operator=(request&& o) noexcept {
    if (this != &o) {
      finish_quietly();
      source_ = std::exchange(o.source_, nullptr);
      ticket_ = o.ticket_;
    }
    return *this;
  }
  // A request dropped while pending is waited for: its buffers are still in use, so
  // returning earlier would let the caller free memory the lane is reading.
  ~request() { finish_quietly(); }

  void wait() {
    auto* s = std::exchange(source_, nullptr);
    if (!s) return;
    // A step profile counts the time its thread (or, on a GPU, its stream) waits here.
    auto* profile = detail::this_thread_profile();
    if (profile) profile->enter("wait", "waits");
    struct leave_after {
      detail::profile_hook* p;
      ~leave_after() {
        if (p) p->leave();
      }
    } leave{profile};
    s->wait(ticket_);
  }
  // True once complete. Completion consumes the request, so an error is rethrown here.
  bool test() {
    if (!source_) return true;
    if (!source_->test(ticket_)) return false;
    wait();
    return true;
  }
  bool pending() const noexcept { return source_ != nullptr; }

 private:
  void finish_quietly() noexcept {
    try {
      wait();
    } catch (const std::exception& e) {
      // A destructor cannot throw: say what was lost rather than dropping it silently.
      std::fprintf(stderr, "strata: error in an asynchronous operation that was never waited on: %s\n", e.what());
    } catch (...) {
      std::fprintf(stderr, "strata: unknown error in an asynchronous operation that was never waited on\n");
    }
  }
  detail::request_source* source_ = nullptr;
  std::uint64_t ticket_ = 0;
};

}  // namespace strata
