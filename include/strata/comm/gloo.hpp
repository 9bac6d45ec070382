// gloo_comm: the host communicator without MPI, over Gloo's TCP transport (what PyTorch's
// gloo backend uses). A job that torchrun, Ray, Kubernetes or Slurm started forms its
// world through strata's TCP rendezvous (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE); the
// members and rules are mpi_comm's: one lane thread runs operations in call order, every
// operation is timed (STRATA_COMM_TIMEOUT), and a dead peer is a comm_error naming it.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/error.hpp"
#include "communicator.hpp"
#include "detail/gloo_exec.hpp"
#include "detail/lane_comm.hpp"
#include "detail/rendezvous.hpp"
#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

// Buffers passed to an *_async call belong to the operation until its request completes;
// a blocking form is its asynchronous form followed by wait(). Send and receive match by
// peer and tag, in order.
class gloo_comm : public detail::lane_comm<gloo_comm, detail::gloo_task> {
 public:
  // Collective over the whole job: every rank calls it with the same MASTER_ADDR,
  // MASTER_PORT and WORLD_SIZE; rank 0 hosts the rendezvous that swaps the addresses.
  static gloo_comm world(const detail::rendezvous_config& c, std::string name = "world") {
    auto ctx = std::make_shared<detail::gloo_group_context>(c.rank, c.world_size, gloo_limit());
    if (c.world_size > 1) {
      // The device resolves MASTER_ADDR for its route before any rank connects.
      if (!detail::gloo_ifname_from_env()) detail::wait_until_resolves(c.master_addr, detail::deadline_in(c.timeout));
      ctx->connect(
          detail::gloo_device(c.master_addr, !detail::launched_on_one_machine(c)),
          [&](std::span<const std::byte> mine) { return detail::rendezvous_all_to_all(c, mine, "gloo " + name); },
          name);
    }
    std::vector<int> members(static_cast<std::size_t>(c.world_size));
    std::iota(members.begin(), members.end(), 0);
    return gloo_comm(std::move(ctx), std::move(name), std::move(members), 1, c.master_addr);
  }

  // Collective over `host` (an mpi_comm, say): a Gloo communicator of the same processes,
  // connected through it. `master_addr` as in world(): loopback keeps it on this machine.
  // Its pairs' addresses travel as messages on `host` with tag connect_tag (32767): no
  // message of the program's with that tag may be pending there meanwhile.
  template <class Host>
  requires(!std::same_as<Host, gloo_comm>) && communicator<Host>
  static gloo_comm over(Host& host, std::string name, const std::string& master_addr = "") {
    std::vector<int> all(static_cast<std::size_t>(host.size()));
    std::iota(all.begin(), all.end(), 0);
    auto ctx = connect_group(host, all, master_addr, name);
    return gloo_comm(std::move(ctx), std::move(name), std::move(all), 1, master_addr);
  }

  gloo_comm(gloo_comm&&) noexcept = default;
  gloo_comm& operator=(gloo_comm&&) noexcept = default;
  ~gloo_comm() = default;

  int rank() const { return state().rank(); }
  int size() const { return state().size(); }
  const std::string& name() const { return state().name(); }
  void set_name(std::string name) { state().set_name(std::move(name)); }
  std::chrono::duration<double> timeout() const { return state().queue().timeout(); }
  void set_timeout(std::chrono::duration<double> t) { state().set_timeout(t); }

  // Collective: ranks with the same color form a communicator, ordered by key then rank.
  // (Its members' addresses travel as messages with tag connect_tag, after a collective
  // that every earlier message on this communicator has passed.)
  gloo_comm split(int color, int key) {
    expects<comm_error>(color >= 0,
                        [&] { return strata::cat("split of ", name(), ": color ", color, " must be >= 0"); });
    const int n = size();
    std::vector<std::int64_t> ck(2 * static_cast<std::size_t>(n));
    ck[2 * static_cast<std::size_t>(rank())] = color;
    ck[2 * static_cast<std::size_t>(rank()) + 1] = key;
    all_gather(std::span<std::int64_t>(ck).subspan(2 * static_cast<std::size_t>(rank()), 2), std::span(ck));
    std::vector<int> group;  // parent ranks of the new communicator, in its order
    for (int r = 0; r < n; ++r)
      if (ck[2 * static_cast<std::size_t>(r)] == color) group.push_back(r);
    std::stable_sort(group.begin(), group.end(), [&](int a, int b) {
      return ck[2 * static_cast<std::size_t>(a) + 1] < ck[2 * static_cast<std::size_t>(b) + 1];
    });
    std::string child = strata::cat(name(), "/", color);
    auto ctx = connect_group(*this, group, master_addr_, child);
    std::vector<int> members;
    for (int r : group) members.push_back(state().members()[static_cast<std::size_t>(r)]);
    const std::uint64_t id = id_ * 1000003u + ++splits_ * 1009u + static_cast<std::uint64_t>(color) + 1;
    return gloo_comm(std::move(ctx), std::move(child), std::move(members), id, master_addr_);
  }

 private:
  gloo_comm(std::shared_ptr<detail::gloo_group_context> ctx, std::string name, std::vector<int> members,
            std::uint64_t id, std::string master_addr)
      : s_(std::make_unique<detail::gloo_state>(std::move(ctx), std::move(name), std::move(members), id)),
        id_(id),
        master_addr_(std::move(master_addr)) {}

  // The Gloo context of `group` (parent ranks, in the new order), connected by sending
  // each member's address blocks over `parent`: every member sends each other member the
  // address of its pair with it, m - 1 blocks a rank (an all-gather of every rank's blocks
  // was n^2 a rank: 820 MB at 2048 ranks). Members of other groups take no part. Round k
  // sends to the member k after this one and receives from the one k before, so each
  // send meets its receive; 16 rounds are in flight at a time, within the lane's 64 tasks.
  template <class Parent>
  static std::shared_ptr<detail::gloo_group_context> connect_group(Parent& parent, const std::vector<int>& group,
                                                                   const std::string& master_addr,
                                                                   const std::string& name) {
    const int m = static_cast<int>(group.size());
    const int me = static_cast<int>(std::find(group.begin(), group.end(), parent.rank()) - group.begin());
    auto ctx = std::make_shared<detail::gloo_group_context>(me, m, gloo_limit());
    if (m == 1) return ctx;
    constexpr std::size_t ab = detail::gloo_address_bytes;
    const auto exchange = [&](std::span<const std::byte> mine) {
      const auto* sent = reinterpret_cast<const std::uint8_t*>(mine.data());
      std::vector<std::uint8_t> got(static_cast<std::size_t>(m) * ab);
      try {
        for (int first = 1; first < m; first += 16) {
          std::vector<request> pending;
          for (int k = first; k < std::min(m, first + 16); ++k) {
            const auto to = static_cast<std::size_t>((me + k) % m), from = static_cast<std::size_t>((me - k + m) % m);
            pending.push_back(parent.recv_async(std::span(got).subspan(from * ab, ab), group[from], connect_tag));
            pending.push_back(parent.send_async(std::span(sent + to * ab, ab), group[to], connect_tag));
          }
          for (auto& r : pending) r.wait();
        }
      } catch (const comm_error& e) {
        throw comm_error(strata::cat("gloo: connecting ", name, " (rank ", me, " of ", m,
                                     "): exchanging pair addresses: ", e.what()));
      }
      std::vector<std::vector<std::byte>> out(static_cast<std::size_t>(m));
      for (std::size_t q = 0; q < out.size(); ++q) {
        const auto* b = reinterpret_cast<const std::byte*>(got.data() + q * ab);
        out[q].assign(b, b + ab);
      }
      return out;
    };
    ctx->connect(detail::gloo_device(master_addr), exchange, name);
    return ctx;
  }

  // The tag of connect_group's messages: the largest every MPI takes (MPI_TAG_UB >= 32767).
  static constexpr int connect_tag = 32767;

  // Gloo's limit: the lane's, plus a margin (see gloo_state::set_timeout).
  static std::chrono::milliseconds gloo_limit() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(detail::default_comm_timeout()) +
           std::chrono::seconds(5);
  }

  detail::gloo_state& state() const {
    expects<comm_error>(s_ != nullptr, [&] { return "use of a moved-from strata::gloo_comm"; });
    return *s_;
  }
  friend class detail::lane_comm<gloo_comm, detail::gloo_task>;
  template <class T>
  static detail::gloo_task task(detail::gloo_task::kind k, std::size_t count) {
    detail::gloo_task t;
    t.k = k;
    t.elem = sizeof(T);
    t.count = count;
    return t;
  }
  template <class T>
  static void set_reduce(detail::gloo_task& t, reduce_op op) {
    switch (op) {
      case reduce_op::max: t.reduce = &detail::gloo_reduce<T, detail::f_max>; break;
      case reduce_op::min: t.reduce = &detail::gloo_reduce<T, detail::f_min>; break;
      default: t.reduce = &detail::gloo_reduce<T, detail::f_sum>;
    }
  }
  void run_now(const detail::gloo_task& t) { submit(t).wait(); }
  // Gloo has no pair from a rank to itself.
  void check_message(detail::gloo_task::kind k, int peer) const {
    expects<comm_error>(peer != rank(), [&] {
      return strata::cat(k == detail::gloo_task::kind::send ? "send to" : "recv from", " rank ", peer, " on ", name(),
                         ": a rank cannot message itself over gloo; copy the data instead");
    });
  }

  std::unique_ptr<detail::gloo_state> s_;
  std::uint64_t id_ = 0;
  std::uint64_t splits_ = 0;
  std::string master_addr_;
};

}  // namespace strata
