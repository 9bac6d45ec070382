// Activations and their gradients between neighbouring pipeline stages: a small shape
// header, then the data, each as an asynchronous send or a receive into a tensor that
// grows to fit. Forward and backward traffic use separate communicators (lanes), so a
// stage sending forward never queues behind its own backward receive. The header, host
// memory, goes over the host communicator; the data over the one that moves the space's
// buffers (on the host the same one, on a GPU the device communicator between the same
// two stages).
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <span>

#include "../../comm/request.hpp"
#include "../../core/error.hpp"
#include "../../space/tensor.hpp"

namespace strata::detail {

using shape_header = std::array<std::int64_t, 1 + shape::max_rank>;

// A send in flight: the header must outlive the request.
struct pending_send {
  shape_header header{};
  request head, body;
  void wait() {
    if (head.pending()) head.wait();
    if (body.pending()) body.wait();
  }
};

template <class HostComm, class DataComm, class T, class Space>
void send_tensor(HostComm& host, DataComm& data, const tensor<T, Space>& t, int peer, pending_send& out) {
  out.wait();  // the slot's previous send has left
  out.header[0] = static_cast<std::int64_t>(t.shape().rank);
  for (std::size_t d = 0; d < shape::max_rank; ++d) out.header[1 + d] = d < t.shape().rank ? t.shape()[d] : 0;
  out.head = host.send_async(std::span<const std::int64_t>(out.header), peer, 0);
  out.body = data.send_async(std::span<const T>(t.data(), t.numel()), peer, 0);
}

// Receives into t; returns the seconds spent waiting (the stage's idle time).
template <class HostComm, class DataComm, class T, class Space>
double recv_tensor(HostComm& host, DataComm& data, tensor<T, Space>& t, int peer) {
  const auto t0 = std::chrono::steady_clock::now();
  shape_header h{};
  host.recv(std::span<std::int64_t>(h), peer, 0);
  expects<comm_error>(h[0] >= 1 && h[0] <= static_cast<std::int64_t>(shape::max_rank), [&] {
    return cat("pipeline: received a tensor header of rank ", h[0], " from stage rank ", peer);
  });
  shape s;
  s.rank = static_cast<std::size_t>(h[0]);
  for (std::size_t d = 0; d < s.rank; ++d) s.dims[d] = h[1 + d];
  t.resize(s);
  data.recv(std::span<T>(t.data(), t.numel()), peer, 0);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace strata::detail
