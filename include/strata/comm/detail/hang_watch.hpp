// hang_watch: one thread per MPI process that answers other ranks' requests for this
// rank's recent operations (over its own duplicate of MPI_COMM_WORLD, so a rank stuck in
// computation or in another collective still answers) and writes them on SIGUSR1; and what
// a rank whose operation timed out does before it aborts the job: gathers every rank's
// operations and says which rank(s) did not reach which operation. Every program that
// starts an environment compiles this, so it uses no JSON library (op_history.hpp).
#pragma once
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../core/error.hpp"
#include "../hang_diagnosis.hpp"
#include "../mpi_types.hpp"
#include "abort_hooks.hpp"
#include "comm_registry.hpp"

namespace strata::detail {

// Where each rank writes rank-N.json: STRATA_DIAGNOSE_DIR, or ./strata-diagnose.
inline std::string diagnose_dir() {
  const char* d = std::getenv("STRATA_DIAGNOSE_DIR");
  return d && *d ? d : "strata-diagnose";
}

// Set by the SIGUSR1 handler, read by the watch thread (a handler may do little else).
inline volatile std::sig_atomic_t sigusr1_seen = 0;
extern "C" inline void strata_on_sigusr1(int) { sigusr1_seen = 1; }

class hang_watch {
 public:
  // How long a rank whose operation timed out waits for the others' answers.
  static constexpr std::chrono::seconds answer_wait{5};

  hang_watch() {
    STRATA_CHECK_MPI(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Only where the program has not taken SIGUSR1 for itself (its default ends the process).
    struct sigaction old {};
    if (sigaction(SIGUSR1, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
      struct sigaction sa {};
      sa.sa_handler = strata_on_sigusr1;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      owns_signal_ = sigaction(SIGUSR1, &sa, nullptr) == 0;
    }
    thread_ = std::thread([this] { loop(); });
    active().store(this, std::memory_order_release);
  }
  hang_watch(const hang_watch&) = delete;
  hang_watch& operator=(const hang_watch&) = delete;
  ~hang_watch() {
    active().store(nullptr, std::memory_order_release);
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    if (owns_signal_) std::signal(SIGUSR1, SIG_DFL);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  // The watch of this process, while an environment holds MPI open.
  static std::atomic<hang_watch*>& active() {
    static std::atomic<hang_watch*> w{nullptr};
    return w;
  }

  [[gnu::cold]] rank_dump dump(std::string reason) const {
    rank_dump d;
    d.world_rank = rank_;
    d.world_size = size_;
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    d.host = host;
    d.pid = static_cast<long>(getpid());
    d.reason = std::move(reason);
    d.taken_at = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    d.comms = comm_registry::get().snapshot();
    return d;
  }

  // Prints `line`, gathers every rank's operations, prints which rank(s) the job waits
  // for (on the lowest waiting rank, so the diagnosis appears once), aborts the job.
  [[noreturn, gnu::cold]] void timed_out(const std::string& line, double timeout_s) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    static std::atomic<bool> reporting{false};
    if (reporting.exchange(true)) {  // another of this rank's communicators is reporting
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s) + 2 * answer_wait);
      abort_job();
    }
    std::vector<rank_dump> dumps{dump("time-out")};
    write_file(dumps.front());
    static const int ask = 0;
    std::vector<MPI_Request> asks;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) MPI_Isend(&ask, 1, MPI_INT, r, tag_request, comm_, &asks.emplace_back());
    std::set<int> have{rank_};
    const auto deadline = std::chrono::steady_clock::now() + answer_wait;
    while (static_cast<int>(have.size()) < size_ && std::chrono::steady_clock::now() < deadline) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, tag_reply, comm_, &flag, &st) != MPI_SUCCESS) break;
      if (!flag) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        continue;
      }
      int n = 0;
      MPI_Get_count(&st, MPI_CHAR, &n);
      std::string text(static_cast<std::size_t>(std::max(n, 0)), '\0');
      MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, tag_reply, comm_, MPI_STATUS_IGNORE);
      rank_dump d;
      if (from_wire(text, d) && d.world_rank >= 0 && d.world_rank < size_) {
        if (have.insert(d.world_rank).second) dumps.push_back(std::move(d));
      } else {
        std::fprintf(stderr, "strata: rank %d: rank %d's answer is not a dump of its operations\n", rank_,
                     st.MPI_SOURCE);
      }
    }
    const auto h = diagnose_hang(dumps, size_);
    int leader = rank_;
    for (int r : h.waiting) leader = std::min(leader, r);
    if (leader != rank_) {
      std::fprintf(stderr, "strata: rank %d: rank %d (the lowest rank waiting) prints the diagnosis\n", rank_, leader);
      std::fflush(stderr);
      // It waits in an operation that started before now, so it times out within its own
      // time-out; if it does not report by then, this rank does.
      std::this_thread::sleep_for(std::chrono::duration<double>(timeout_s) + 2 * answer_wait);
    }
    const std::string dir = diagnose_dir();
    std::fprintf(stderr,
                 "strata: rank %d: diagnosis from the last operations of %zu of %d ranks (each rank wrote "
                 "%s/rank-N.json; scripts/diagnose %s reads them again):\n%s",
                 rank_, dumps.size(), size_, dir.c_str(), dir.c_str(), h.text("strata:   ").c_str());
    std::fflush(stderr);
    abort_job();
  }

 private:
  static constexpr int tag_request = 1, tag_reply = 2;

  // DIR/rank-N.json, written whole or not at all (a rename); a failure is a warning only.
  [[gnu::cold]] void write_file(const rank_dump& d) const {
    namespace fs = std::filesystem;
    const fs::path dir = diagnose_dir();
    const fs::path path = dir / cat("rank-", rank_, ".json");
    const fs::path tmp = dir / cat(".rank-", rank_, ".json.tmp");
    std::error_code ec;
    fs::create_directories(dir, ec);
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << to_json_text(d) << "\n";
      if (!f) ec = std::make_error_code(std::errc::io_error);
    }
    if (!ec) fs::rename(tmp, path, ec);
    if (ec)
      std::fprintf(stderr, "strata: rank %d: could not write %s: %s\n", rank_, path.c_str(), ec.message().c_str());
  }

  [[gnu::cold]] void loop() {
    int ask = 0;
    MPI_Request request = MPI_REQUEST_NULL;
    MPI_Irecv(&ask, 1, MPI_INT, MPI_ANY_SOURCE, tag_request, comm_, &request);
    std::vector<std::pair<std::unique_ptr<std::string>, MPI_Request>> answers;
    for (;;) {
      {
        std::unique_lock lk(m_);
        // Ten looks a second: an answer arrives well within answer_wait, at no measurable cost.
        if (cv_.wait_for(lk, std::chrono::milliseconds(100), [&] { return stop_; })) break;
      }
      if (sigusr1_seen) {
        sigusr1_seen = 0;
        write_file(dump("SIGUSR1"));
        std::fprintf(stderr, "strata: rank %d: wrote its last operations to %s/rank-%d.json (SIGUSR1)\n", rank_,
                     diagnose_dir().c_str(), rank_);
      }
      int flag = 0;
      MPI_Status st;
      if (request != MPI_REQUEST_NULL && MPI_Test(&request, &flag, &st) == MPI_SUCCESS && flag) {
        const auto d = dump(cat("asked by rank ", st.MPI_SOURCE));
        write_file(d);
        auto text = std::make_unique<std::string>(to_wire(d));
        MPI_Request r = MPI_REQUEST_NULL;
        MPI_Isend(text->data(), static_cast<int>(text->size()), MPI_CHAR, st.MPI_SOURCE, tag_reply, comm_, &r);
        answers.emplace_back(std::move(text), r);
        MPI_Irecv(&ask, 1, MPI_INT, MPI_ANY_SOURCE, tag_request, comm_, &request);
      }
      std::erase_if(answers, [](auto& a) {
        int done = 0;
        return MPI_Test(&a.second, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done;
      });
    }
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      MPI_Wait(&request, MPI_STATUS_IGNORE);
    }
    // An answer its asker never took (it is aborting the job): MPI may still read the
    // text, so it is released, not freed.
    for (auto& a : answers) {
      MPI_Request_free(&a.second);
      (void)a.first.release();
    }
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  bool owns_signal_ = false;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace strata::detail
