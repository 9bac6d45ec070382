// The types the parts of a trainer body agree on, from the policies that shape its code:
// space, sharding stage, whether the optimizer state is offloaded, precision.
#pragma once
#include <type_traits>
#include <vector>

#include "../../comm/environment.hpp"
#include "../../comm/grid.hpp"
#include "../../optim/loss_scaler.hpp"
#include "../../space/host.hpp"
#include "../../space/tensor.hpp"
#include "../context.hpp"
#include "device_side.hpp"
#include "sharded_state.hpp"

namespace strata::detail {

// Offload is true only off the host: there it keeps master and moments in
// offload_space<Space>; on the host it would be the same code (see trainer.hpp).
template <class Space, int Stage, bool Offload, class Precision>
struct trainer_types {
  using space_type = Space;
  using precision = Precision;
  using compute_t = typename Precision::compute_type;
  using comm_t = world_comm;
  using grid_t = grid<comm_t>;
  using dev_t = device_side<Space>;
  // Moves gradients and params: the host communicator itself, or NCCL on a GPU.
  using dev_comm_t = typename dev_t::comm_t;
  static constexpr bool on_host = std::is_same_v<Space, host>;
  // The compute params' element type: on a GPU the compute precision itself (16 bits in
  // mixed precision: half the bytes, gathered as 16 bits, read by tensor cores); on the
  // host float holding the rounded values, since BLAS multiplies floats.
  using param_t = std::conditional_t<on_host, float, compute_t>;
  // Layers read params and pass activations in param_t (see context.hpp).
  using ctx_t = context<Space, dev_comm_t, param_t>;
  using opt_space = std::conditional_t<Offload, typename offload_space<Space>::type, Space>;
  using state_t = sharded_state<compute_t, Space, opt_space, param_t>;
  static constexpr int stage = Stage;
  static constexpr bool split = !std::is_same_v<opt_space, Space>;  // state off the device
};

// Where the sequence of steps stands: what a checkpoint keeps besides the arrays.
struct step_counters {
  long step = 0;              // optimizer steps taken, skipped ones included
  std::vector<long> skipped;  // the steps skipped for non-finite gradients
  loss_scaler scaler;
};

}  // namespace strata::detail
