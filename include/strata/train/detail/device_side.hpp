// What a trainer holds to compute in its space: the engine (stream and BLAS handle on a
// GPU), the communicators that move gradients and params there, a host engine that
// steps an offloaded optimizer state, and the device copy of a batch given in host memory.
#pragma once
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "../batch.hpp"
#include "engine.hpp"

namespace strata::detail {

template <class Space>
struct device_side {
  using engine_t = engine<Space>;
  using comm_t = typename engine_t::comm_type;

  std::unique_ptr<engine_t> eng;
  engine<host> host_eng;
  comm_t* dp = nullptr;  // data-parallel: reduce-scatters grads, all-gathers params
  std::optional<comm_t> dp_own, tp_own;
  batch<Space> staged;

  // Makes the engine for buffers of up to `largest` elements, and the communicators: on
  // the host the grid's own; on a GPU, NCCL communicators over the same processes
  // (collective over the world, which must have one GPU per rank, then data, then
  // tensor). The context gets the
  // engine's executor and the tensor-parallel communicator, and on a GPU the engine's
  // deferred id checks and GEMMs on Compute operands (tensor cores for 16 bits).
  template <class Compute, class HostComm, class Ctx>
  void start(std::size_t largest, HostComm& world, HostComm& data, HostComm& tensor, Ctx& ctx) {
    eng = std::make_unique<engine_t>(largest);
    if constexpr (std::is_same_v<comm_t, HostComm>) {
      (void)world;
      dp = &data;
      ctx.set_tp(&tensor);
    } else {
      eng->template use_gemm_operands<Compute>();
      eng->check_one_process_per_gpu(world);
      dp_own.emplace(eng->make_comm(data, "data"));
      dp = &*dp_own;
      // Also at tp = 1, so that a layer sees a (size-1) tensor group in both spaces.
      tp_own.emplace(eng->make_comm(tensor, "tensor"));
      ctx.set_tp(&*tp_own);
      ctx.set_id_checks(eng->id_checks());
    }
    ctx.set_exec(eng->exec());
  }

  // A batch in another space (host memory for a GPU trainer), copied into this one.
  template <class S>
  const batch<Space>& stage(const batch<S>& b) {
    for (auto [from, to] : {std::pair{&b.inputs, &staged.inputs}, std::pair{&b.targets, &staged.targets}}) {
      to->resize(from->shape());
      eng->upload(to->data(), from->data(), from->numel());
    }
    return staged;
  }
};

}  // namespace strata::detail
