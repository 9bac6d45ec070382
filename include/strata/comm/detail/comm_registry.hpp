// Every live communicator that can describe its recent operations, so that a hang report
// (comm/detail/hang_watch.hpp) sees all of them without anyone passing them in.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "../op_history.hpp"

namespace strata::detail {

class history_source {
 public:
  virtual comm_history history() = 0;

 protected:
  ~history_source() = default;
};

class comm_registry {
 public:
  // Never destroyed: communicators held in static storage may outlive any static here.
  static comm_registry& get() {
    static comm_registry* r = new comm_registry;
    return *r;
  }
  void add(history_source* s) {
    std::lock_guard lk(m_);
    sources_.push_back(s);
  }
  // Waits for a snapshot in progress, so a source is never read while it is destroyed.
  void remove(history_source* s) {
    std::lock_guard lk(m_);
    sources_.erase(std::remove(sources_.begin(), sources_.end(), s), sources_.end());
  }
  std::vector<comm_history> snapshot() {
    std::lock_guard lk(m_);
    std::vector<comm_history> out;
    out.reserve(sources_.size());
    for (auto* s : sources_) out.push_back(s->history());
    return out;
  }
  // A number no other communicator this process creates gets.
  std::uint64_t next_local_id() { return ++ids_; }

 private:
  std::mutex m_;
  std::vector<history_source*> sources_;
  std::atomic<std::uint64_t> ids_{0};
};

}  // namespace strata::detail
