// self_comm: the communicator of a single process. Needs no MPI; collectives are copies,
// and send/recv to oneself go through an in-process mailbox, matched by tag in order.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "comm_forms.hpp"
#include "detail/size_checks.hpp"
#include "detail/time_out.hpp"
#include "reduce_op.hpp"
#include "request.hpp"

namespace strata {

namespace detail {
// Messages a process sent to itself, and receives posted before their send arrived.
class self_mailbox final : public request_source {
 public:
  void send(const void* data, std::size_t n, dtype type, int tag, const std::string& comm) {
    for (auto& p : pending_)
      if (!p.done && p.tag == tag) {
        p.done = true;
        try {
          deliver(p.data, p.n, p.type, data, n, type, tag, comm);
        } catch (...) {
          p.error = std::current_exception();
        }
        return;
      }
    const auto* b = static_cast<const std::byte*>(data);
    messages_.push_back({tag, type, n, std::vector<std::byte>(b, b + n * size_of(type))});
  }

  // Returns 0 when the message was there; else the ticket of a receive that completes when
  // it is sent. A blocking receive with nothing to match would wait forever: an error.
  std::uint64_t recv(void* data, std::size_t n, dtype type, int tag, bool may_defer, const std::string& comm) {
    for (auto it = messages_.begin(); it != messages_.end(); ++it)
      if (it->tag == tag) {
        const message m = std::move(*it);
        messages_.erase(it);
        deliver(data, n, type, m.bytes.data(), m.n, m.type, tag, comm);
        return 0;
      }
    expects<comm_error>(may_defer, [&] {
      return cat("recv of ", n, " elements with tag ", tag, " on ", comm,
                 " (a single process): nothing was sent with this tag, it would wait forever");
    });
    pending_.push_back({++last_ticket_, tag, type, data, n, false, nullptr});
    return last_ticket_;
  }

  bool test(std::uint64_t ticket) override { return find(ticket)->done; }

  void wait(std::uint64_t ticket) override {
    auto it = find(ticket);
    const pending p = *it;
    pending_.erase(it);
    expects<comm_error>(p.done, [&] {
      return cat("recv of ", p.n, " elements with tag ", p.tag,
                 " on a single-process communicator: no matching send was posted before the wait,"
                 " it would wait forever");
    });
    if (p.error) std::rethrow_exception(p.error);
  }

 private:
  struct message {
    int tag;
    dtype type;
    std::size_t n;
    std::vector<std::byte> bytes;
  };
  struct pending {
    std::uint64_t ticket;
    int tag;
    dtype type;
    void* data;
    std::size_t n;
    bool done;
    std::exception_ptr error;
  };

  static void deliver(void* dst, std::size_t dst_n, dtype dst_type, const void* src, std::size_t src_n, dtype src_type,
                      int tag, const std::string& comm) {
    expects<comm_error>(dst_type == src_type && dst_n == src_n, [&] {
      return cat("recv with tag ", tag, " on ", comm, ": expected ", dst_n, " elements of ", name_of(dst_type),
                 ", the message has ", src_n, " of ", name_of(src_type));
    });
    if (dst_n) std::memcpy(dst, src, dst_n * size_of(dst_type));
  }
  std::deque<pending>::iterator find(std::uint64_t ticket) {
    for (auto it = pending_.begin(); it != pending_.end(); ++it)
      if (it->ticket == ticket) return it;
    throw comm_error(cat("self_comm: unknown receive ticket ", ticket));
  }

  std::deque<message> messages_;
  std::deque<pending> pending_;
  std::uint64_t last_ticket_ = 0;
};
}  // namespace detail

class self_comm : public comm_forms<self_comm> {
 public:
  explicit self_comm(std::string name = "self")
      : name_(std::move(name)), mailbox_(std::make_unique<detail::self_mailbox>()) {}
  self_comm(self_comm&&) noexcept = default;
  self_comm& operator=(self_comm&&) noexcept = default;

  int rank() const { return 0; }
  int size() const { return 1; }
  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  // Kept for parity with mpi_comm: nothing here can hang.
  std::chrono::duration<double> timeout() const { return timeout_; }
  void set_timeout(std::chrono::duration<double> t) { timeout_ = detail::checked_comm_timeout(t); }

  // With one process every reduction is the identity (avg divides by 1).
  template <comm_element T>
  request all_reduce_async(std::span<T>, reduce_op = reduce_op::sum) {
    return {};
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request reduce_scatter_async(std::span<U> in, std::span<T> out, reduce_op = reduce_op::sum) {
    detail::check_reduce_scatter_sizes(in.size(), out.size(), size(), name_);
    copy(out.data(), in.data(), in.size());
    return {};
  }
  template <class U, comm_element T>
  requires std::is_same_v<std::remove_const_t<U>, T>
  request all_gather_async(std::span<U> in, std::span<T> out) {
    detail::check_all_gather_sizes(in.size(), out.size(), size(), name_);
    copy(out.data(), in.data(), in.size());
    return {};
  }
  template <comm_element T>
  request broadcast_async(std::span<T>, int root) {
    check_rank(root, "broadcast root");
    return {};
  }
  template <class U>
  requires comm_element<std::remove_const_t<U>>
  request send_async(std::span<U> data, int dest, int tag = 0) {
    check_rank(dest, "send destination");
    check_tag(tag);
    mailbox_->send(data.data(), data.size(), dtype_v<std::remove_const_t<U>>, tag, name_);
    return {};
  }
  template <comm_element T>
  request recv_async(std::span<T> data, int src, int tag = 0) {
    check_rank(src, "recv source");
    check_tag(tag);
    const auto ticket = mailbox_->recv(data.data(), data.size(), dtype_v<T>, tag, true, name_);
    return ticket ? request(mailbox_.get(), ticket) : request();
  }
  request barrier_async() { return {}; }

  // The blocking forms are comm_forms'; recv is this backend's own: with one process a
  // receive with nothing sent before it would wait forever, which is an error here.
  template <comm_element T>
  void recv(std::span<T> data, int src, int tag = 0) {
    check_rank(src, "recv source");
    check_tag(tag);
    mailbox_->recv(data.data(), data.size(), dtype_v<T>, tag, false, name_);
  }
  void barrier() {}

  self_comm split(int color, int) {
    expects<comm_error>(color >= 0,
                        [&] { return strata::cat("split of ", name_, ": color ", color, " must be >= 0"); });
    self_comm c(strata::cat(name_, "/", color));
    c.timeout_ = timeout_;
    return c;
  }

 private:
  template <class T>
  static void copy(T* dst, const T* src, std::size_t n) {
    if (dst != src && n) std::memmove(dst, src, n * sizeof(T));
  }
  void check_rank(int r, const char* what) const {
    expects<comm_error>(r == 0, [&] {
      return strata::cat(what, " ", r, " on ", name_, ": a single-process communicator has rank 0 only");
    });
  }
  void check_tag(int tag) const {
    expects<comm_error>(tag >= 0, [&] { return strata::cat("tag ", tag, " on ", name_, ": tags must be >= 0"); });
  }

  std::string name_;
  std::chrono::duration<double> timeout_{300.0};
  std::unique_ptr<detail::self_mailbox> mailbox_;
};

}  // namespace strata
