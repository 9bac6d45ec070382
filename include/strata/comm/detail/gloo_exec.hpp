// What a gloo_comm's lane executes: one plain descriptor per operation and the code that
// runs it on Gloo's TCP transport, and the Gloo context of a group, connected by an
// exchange of its pairs' addresses over whatever the group already has (the TCP
// rendezvous for the world, the parent communicator for a split).
#pragma once
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/reduce.h>
#include <gloo/transport/address.h>
#include <gloo/transport/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../../core/error.hpp"
#include "abort_hooks.hpp"
#include "comm_registry.hpp"
#include "lane.hpp"
#include "lane_report.hpp"
#include "reduce_math.hpp"
#include "rendezvous_socket.hpp"

namespace strata::detail {

// A pair's address travels as a 4-byte length and its bytes, padded to this.
inline constexpr std::size_t gloo_address_bytes = 4 + ::gloo::transport::Address::kMaxByteSize;

// A Gloo context whose pairs strata connects itself: Gloo's own connectFullMesh needs a
// key-value store, and an exchange of fixed-size address blocks over the group's existing
// channel needs none.
class gloo_group_context final : public ::gloo::Context, public std::enable_shared_from_this<gloo_group_context> {
 public:
  gloo_group_context(int rank, int size, std::chrono::milliseconds timeout) : ::gloo::Context(rank, size) {
    setTimeout(timeout);
  }

  // exchange(mine) returns, in member order, what each member's block holds for this rank,
  // where `mine` holds, for each member p, the address of this rank's pair with p (empty
  // for itself): one address a member. `name` is the communicator's, for errors.
  // Collective over the members.
  template <class Exchange>
  void connect(const std::shared_ptr<::gloo::transport::Device>& dev, Exchange&& exchange, const std::string& name) {
    try {
      connect_pairs(dev, exchange);
      // A pair's listening side is marked connected by the device's event loop, after
      // the peer's connect() has returned: a peer that closed the context at once (a
      // split it never used) could close the connection first, and this rank's connect
      // then failed with "Connection closed by peer" (a split in a few hundred). No rank
      // leaves this barrier before every member has finished connecting.
      ::gloo::BarrierOptions o(shared_from_this());
      o.setTimeout(getTimeout());
      ::gloo::barrier(o);
    } catch (const ::gloo::Exception& e) {
      throw comm_error(cat("gloo: connecting ", name, " (rank ", rank, " of ", size, "): ", e.what(),
                           " (a peer process ended or stalled; its own output says why)"));
    }
  }

 private:
  template <class Exchange>
  void connect_pairs(const std::shared_ptr<::gloo::transport::Device>& dev, Exchange&& exchange) {
    auto tc = dev->createContext(rank, size);
    tc->setTimeout(getTimeout());
    std::vector<std::byte> mine(static_cast<std::size_t>(size) * gloo_address_bytes);
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const std::vector<char> a = tc->createPair(p)->address().bytes();
      auto* at = mine.data() + static_cast<std::size_t>(p) * gloo_address_bytes;
      const auto n = static_cast<std::uint32_t>(a.size());
      std::memcpy(at, &n, 4);
      std::memcpy(at + 4, a.data(), a.size());
    }
    const std::vector<std::vector<std::byte>> all = exchange(std::span<const std::byte>(mine));
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      const auto& theirs = all[static_cast<std::size_t>(p)];
      expects<comm_error>(theirs.size() == gloo_address_bytes, [&] {
        return cat("gloo: member ", p, " sent ", theirs.size(), " bytes of address, expected ", gloo_address_bytes);
      });
      const auto* at = theirs.data();
      std::uint32_t n = 0;
      std::memcpy(&n, at, 4);
      expects<comm_error>(n > 0 && n + 4 <= gloo_address_bytes,
                          [&] { return cat("gloo: member ", p, " sent no address for its pair with ", rank); });
      const auto* bytes = reinterpret_cast<const char*>(at + 4);
      tc->getPair(p)->connect(std::vector<char>(bytes, bytes + n));
    }
    device_ = dev;
    transportContext_ = std::move(tc);
  }
};

// Gloo's TCP transport writes with writev, which raises SIGPIPE when a peer has gone; by
// default that ends this process silently (exit 141) before the lane can name the
// operation. Python (and so torch's Gloo) ignores SIGPIPE at start-up; a C++ program must
// do it itself. A handler the program installed is left alone.
inline void ignore_sigpipe_by_default() {
  struct sigaction now {};
  if (::sigaction(SIGPIPE, nullptr, &now) == 0 && now.sa_handler == SIG_DFL) {
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, nullptr);
  }
}

// The process's TCP device (one event loop for every Gloo context). STRATA_GLOO_IFNAME or
// GLOO_SOCKET_IFNAME names the interface; else it is this machine's address on its route
// to MASTER_ADDR, or loopback where MASTER_ADDR is loopback (a job on one machine). Where
// MASTER_ADDR is a *name* for loopback here and the job `may_span_machines`, peers
// elsewhere could not reach that: the first network interface's address (decision 0047).
inline std::shared_ptr<::gloo::transport::Device> gloo_device(const std::string& master_addr,
                                                              bool may_span_machines = false) {
  static std::mutex m;
  static std::weak_ptr<::gloo::transport::Device> shared;
  std::lock_guard lk(m);
  if (auto d = shared.lock()) return d;
  ignore_sigpipe_by_default();
  ::gloo::transport::tcp::attr a;
  const char* advice = " (set STRATA_GLOO_IFNAME to the network interface the ranks reach each other on)";
  if (const char* ifname = gloo_ifname_from_env()) {
    a.iface = ifname;
  } else if (master_addr == "localhost" || master_addr.rfind("127.", 0) == 0 || master_addr == "::1") {
    a.hostname = "127.0.0.1";
  } else if (may_span_machines && !loopback_master_name(master_addr).empty()) {
    const network_interface net = first_network_interface();
    a.hostname = net.address.empty() ? "127.0.0.1" : net.address;
  } else {
    // Not the host name: where it maps to a loopback address (Debian's and Ubuntu's
    // 127.0.1.1) peers on other machines cannot connect to it, and where it does not
    // resolve Gloo reads getaddrinfo's unset list (it checks only for -1) and spins.
    try {
      a.hostname = local_address_toward(master_addr);
    } catch (const comm_error& e) {
      throw comm_error(cat("gloo: ", e.what(), advice));
    }
  }
  try {
    auto d = ::gloo::transport::tcp::CreateDevice(a);
    shared = d;
    return d;
  } catch (const std::exception& e) {
    throw comm_error(cat("gloo: cannot open a TCP device on ",
                         a.iface.empty() ? "host " + a.hostname : "interface " + a.iface, ": ", e.what(), advice));
  }
}

struct gloo_task {
  enum class kind : std::uint8_t { all_reduce, reduce_scatter, all_gather, broadcast, send, recv, barrier };
  using reduce_fn = void (*)(void*, const void*, const void*, std::size_t);
  kind k = kind::barrier;
  const void* in = nullptr;
  void* out = nullptr;
  std::size_t n = 0;      // elements per call: the whole buffer, or one rank's block
  std::size_t count = 0;  // elements the caller passed, for messages
  std::size_t elem = 0;   // bytes per element
  int peer = 0;           // root, destination or source
  int tag = 0;
  reduce_fn reduce = nullptr;
  void (*finish)(void*, std::size_t, int) = nullptr;  // avg: divide by the size
};

constexpr const char* name_of(gloo_task::kind k) {
  switch (k) {
    case gloo_task::kind::all_reduce: return "all_reduce";
    case gloo_task::kind::reduce_scatter: return "reduce_scatter";
    case gloo_task::kind::all_gather: return "all_gather";
    case gloo_task::kind::broadcast: return "broadcast";
    case gloo_task::kind::send: return "send";
    case gloo_task::kind::recv: return "recv";
    case gloo_task::kind::barrier: return "barrier";
  }
  return "?";
}

template <class T, class F>
void gloo_reduce(void* out, const void* a, const void* b, std::size_t n) {
  combine<T, F>(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
}

// Point-to-point messages take slots apart from Gloo's collectives (whose prefixes are
// small numbers in the top byte).
inline std::uint64_t gloo_p2p_slot(int tag) { return (std::uint64_t{0x53} << 56) | static_cast<std::uint32_t>(tag); }

// The state behind one gloo_comm: its context and its lane, on the heap so that moves of
// the gloo_comm keep the lane's reference.
class gloo_state final : public history_source {
 public:
  gloo_state(std::shared_ptr<gloo_group_context> ctx, std::string name, std::vector<int> members, std::uint64_t id)
      : ctx_(std::move(ctx)),
        name_(std::move(name)),
        members_(std::move(members)),
        id_(id),
        waiter_(*this),
        lane_(*this, default_comm_timeout()) {
    comm_registry::get().add(this);
  }
  gloo_state(const gloo_state&) = delete;
  gloo_state& operator=(const gloo_state&) = delete;
  // The lane finishes what is queued first (it is the last member), then the waiter.
  ~gloo_state() { comm_registry::get().remove(this); }

  int rank() const { return ctx_->rank; }
  int size() const { return ctx_->size; }
  const std::shared_ptr<gloo_group_context>& context() const { return ctx_; }
  const std::vector<int>& members() const { return members_; }
  const std::string& name() const { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }
  lane<gloo_task, gloo_state>& queue() { return lane_; }
  // Gloo's own limit sits past the lane's, so that a stalled peer is reported by the lane
  // (naming the operation and aborting the job) and a dead one by Gloo (a closed connection).
  void set_timeout(std::chrono::duration<double> t) {
    lane_.set_timeout(t);
    ctx_->setTimeout(gloo_timeout());
  }
  std::chrono::milliseconds gloo_timeout() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(lane_.timeout()) + std::chrono::seconds(5);
  }

  // ---- the lane's executor interface ----
  static bool overlaps(const gloo_task& t) { return t.k == gloo_task::kind::send || t.k == gloo_task::kind::recv; }

  bool start(const gloo_task& t, std::size_t slot) {
    return with_context(t, [&] { return run(t, slot); });
  }

  bool poll(const gloo_task& t, std::size_t slot) {
    return with_context(t, [&] {
      p2p_slot& s = p2p_[slot];
      const int st = s.state.load(std::memory_order_acquire);
      if (st == 0) return false;
      s.buf.reset();
      if (st == 2) std::rethrow_exception(std::exchange(s.error, nullptr));
      return true;
    });
  }

  [[noreturn, gnu::cold]] void timed_out(const gloo_task& t, double seconds) {
    std::fprintf(stderr, "strata: rank %d: %s of %zu elements timed out after %g s on %s (a peer stalled or died)\n",
                 world_rank(), name_of(t.k), t.count, seconds, name_.c_str());
    std::fflush(stderr);
    abort_job();
  }

  void traced(const gloo_task& t, std::uint64_t seq, std::int64_t start_ns, std::int64_t end_ns) {
    trace_lane_task(name_, t, seq, start_ns, end_ns);
  }

  [[gnu::cold]] comm_history history() override { return lane_history(lane_, name_, id_, members_, rank()); }

 private:
  // A posted send or receive: its buffer, and what the waiter thread found.
  struct p2p_slot {
    std::unique_ptr<::gloo::transport::UnboundBuffer> buf;
    std::atomic<int> state{0};  // 0 in flight, 1 done, 2 failed
    std::exception_ptr error;
    bool send = false;
    unsigned char empty = 0;  // the byte a zero-length message carries
  };

  int world_rank() const { return members_.empty() ? rank() : members_[static_cast<std::size_t>(rank())]; }

  std::string describe(const gloo_task& t) const {
    using k = gloo_task::kind;
    std::string d = cat(name_of(t.k), " of ", t.count, " elements");
    if (t.k == k::send) d += cat(" to rank ", t.peer, " tag ", t.tag);
    if (t.k == k::recv) d += cat(" from rank ", t.peer, " tag ", t.tag);
    return cat(d, " on ", name_, " (rank ", rank(), " of ", size(), ", gloo)");
  }

  // Gloo reports a closed connection, a time-out or a size mismatch with its own
  // exceptions; each becomes a comm_error naming the operation.
  template <class F>
  bool with_context(const gloo_task& t, F&& f) {
    try {
      return f();
    } catch (const comm_error& e) {
      throw comm_error(cat(describe(t), ": ", e.what()));
    } catch (const ::gloo::Exception& e) {
      throw comm_error(cat(describe(t), ": ", e.what(), " (a peer process ended or stalled; its own output says why)"));
    }
  }

  bool run(const gloo_task& t, std::size_t slot) {
    using k = gloo_task::kind;
    const std::size_t bytes = t.n * t.elem;
    auto* in = const_cast<void*>(t.in);
    if (t.k == k::send || t.k == k::recv) {
      post(t, p2p_[slot]);
      return false;
    }
    // One process, or nothing to move: Gloo's algorithms expect a peer and a byte.
    if (size() == 1 || (bytes == 0 && t.k != k::barrier)) {
      if (t.k == k::all_gather && in && in != t.out && bytes) std::memcpy(t.out, in, bytes);
      if (t.k == k::reduce_scatter && bytes) std::memcpy(t.out, in, bytes);
      if (t.finish && bytes) t.finish(t.out, t.n, size());
      return true;
    }
    with_width(t.elem, [&]<class W>(W*) { collective<W>(t, bytes); });
    if (t.finish) t.finish(t.out, t.n, size());
    return true;
  }

  // Gloo sizes its segments in whole elements of the type it is given, and its reduce
  // functions count elements: an unsigned word of the element's width stands for it.
  template <class F>
  static void with_width(std::size_t elem, F&& f) {
    switch (elem) {
      case 1: f(static_cast<std::uint8_t*>(nullptr)); break;
      case 2: f(static_cast<std::uint16_t*>(nullptr)); break;
      case 4: f(static_cast<std::uint32_t*>(nullptr)); break;
      default: f(static_cast<std::uint64_t*>(nullptr)); break;
    }
  }

  template <class W>
  void collective(const gloo_task& t, std::size_t bytes) {
    using k = gloo_task::kind;
    const auto ctx = std::static_pointer_cast<::gloo::Context>(ctx_);
    const auto timeout = gloo_timeout();
    W* in = static_cast<W*>(const_cast<void*>(t.in));
    W* out = static_cast<W*>(t.out);
    switch (t.k) {
      case k::all_reduce: {
        ::gloo::AllreduceOptions o(ctx);
        o.setOutput(out, t.n);
        o.setReduceFunction(t.reduce);
        o.setTimeout(timeout);
        ::gloo::allreduce(o);
        break;
      }
      case k::reduce_scatter: ring_reduce_scatter(t, bytes, timeout); break;
      case k::all_gather: {
        ::gloo::AllgatherOptions o(ctx);
        if (in != out + static_cast<std::size_t>(rank()) * t.n) o.setInput(in, t.n);
        o.setOutput(out, t.n * static_cast<std::size_t>(size()));
        o.setTimeout(timeout);
        ::gloo::allgather(o);
        break;
      }
      case k::broadcast: {
        ::gloo::BroadcastOptions o(ctx);
        o.setOutput(out, t.n);
        o.setRoot(t.peer);
        o.setTimeout(timeout);
        ::gloo::broadcast(o);
        break;
      }
      case k::barrier: {
        ::gloo::BarrierOptions o(ctx);
        o.setTimeout(timeout);
        ::gloo::barrier(o);
        break;
      }
      default: break;
    }
  }

  // A ring: at step s rank r adds its own block (r - s - 2) mod n to the partial sum that
  // rank r - 1 sent and passes it on, so after n - 1 steps it holds block r summed over
  // every rank, in the one order r + 1, r + 2, ..., r: the same run to run, over any
  // ZeRO stage, and n - 1 messages a rank (a reduce to each owner took about 8n). The
  // partial sums alternate between the output and one block of scratch, so that the last
  // lands in the output.
  void ring_reduce_scatter(const gloo_task& t, std::size_t bytes, std::chrono::milliseconds timeout) {
    const int n = size(), r = rank();
    const auto* in = static_cast<const std::uint8_t*>(t.in);
    const auto block = [&](int b) { return in + static_cast<std::size_t>((b % n + n) % n) * bytes; };
    if (scratch_.size() < bytes) scratch_.resize(bytes);
    void* halves[2] = {t.out, scratch_.data()};
    std::unique_ptr<::gloo::transport::UnboundBuffer> bufs[2] = {ctx_->createUnboundBuffer(halves[0], bytes),
                                                                 ctx_->createUnboundBuffer(halves[1], bytes)};
    const auto recv_half = [&](int s) { return (n - 2 - s) % 2; };  // the last step receives into the output
    const std::uint64_t slot = std::uint64_t{0x52} << 56;
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::memcpy(halves[1 - recv_half(0)], block(r - 1), bytes);
    for (int s = 0; s < n - 1; ++s) {
      const int into = recv_half(s);
      bufs[1 - into]->send(next, slot, 0, bytes);
      bufs[into]->recv(prev, slot, 0, bytes);
      bufs[into]->waitRecv(timeout);
      bufs[1 - into]->waitSend(timeout);
      t.reduce(halves[into], halves[into], block(r - s - 2), t.n);
    }
  }

  void post(const gloo_task& t, p2p_slot& s) {
    const std::size_t bytes = t.n * t.elem;
    void* p = t.k == gloo_task::kind::send ? const_cast<void*>(t.in) : t.out;
    s.send = t.k == gloo_task::kind::send;
    s.state.store(0, std::memory_order_relaxed);
    s.error = nullptr;
    if (bytes == 0) p = &s.empty;  // both sides agree on the length, so one byte stands for none
    s.buf = ctx_->createUnboundBuffer(p, bytes == 0 ? 1 : bytes);
    if (s.send)
      s.buf->send(t.peer, gloo_p2p_slot(t.tag));
    else
      s.buf->recv(t.peer, gloo_p2p_slot(t.tag));
    {
      std::lock_guard lk(wm_);
      posted_.push_back(&s);
    }
    wcv_.notify_one();
  }

  // Gloo has no test for a posted buffer, only a wait (whose time-out ends the context),
  // so one thread waits for posted sends and receives in order and marks them done.
  void wait_loop() {
    for (;;) {
      p2p_slot* s = nullptr;
      {
        std::unique_lock lk(wm_);
        wcv_.wait(lk, [&] { return stop_ || !posted_.empty(); });
        if (posted_.empty()) return;
        s = posted_.front();
        posted_.pop_front();
      }
      try {
        if (s->send)
          s->buf->waitSend(gloo_timeout());
        else
          s->buf->waitRecv(gloo_timeout());
        s->state.store(1, std::memory_order_release);
      } catch (...) {
        s->error = std::current_exception();
        s->state.store(2, std::memory_order_release);
      }
    }
  }

  std::shared_ptr<gloo_group_context> ctx_;
  std::string name_;
  std::vector<int> members_;  // world ranks
  std::uint64_t id_ = 0;
  std::vector<std::uint8_t> scratch_;  // a reduce_scatter's blocks that other ranks own
  std::array<p2p_slot, lane_capacity> p2p_{};
  std::mutex wm_;
  std::condition_variable wcv_;
  std::deque<p2p_slot*> posted_;
  bool stop_ = false;
  struct waiter {
    gloo_state& s;
    std::thread thread;
    explicit waiter(gloo_state& st) : s(st), thread([this] { s.wait_loop(); }) {}
    ~waiter() {
      {
        std::lock_guard lk(s.wm_);
        s.stop_ = true;
      }
      s.wcv_.notify_one();
      thread.join();
    }
  } waiter_;
  lane<gloo_task, gloo_state> lane_;  // last: its thread starts once everything above exists
};

}  // namespace strata::detail
