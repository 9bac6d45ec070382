// Memory before launch: the bytes one rank of a layout will hold for a model, by the
// categories of trainer::memory(), from the model's shapes alone (no weights allocated);
// on a GPU also what the device holds beyond them (plan_device_allowance).
// The parameter-state part is the formula the trainer allocates by (state_sizes); the
// activations depend on the model's layers and are the caller's (examples/qwen2/plan.hpp).
#pragma once
#include <cstddef>
#include <utility>
#include <vector>

#include "../model/layout.hpp"
#include "../model/reflect.hpp"
#include "../parallel/bucket_plan.hpp"
#include "../parallel/pipeline.hpp"
#include "../space/device_memory.hpp"
#include "detail/sharded_state.hpp"
#include "report.hpp"

namespace strata {

// The layout and policies a plan is for (the trainer's options and policy types, as values).
struct plan_layout {
  int tp = 1, pp = 1, dp = 1;
  int zero_stage = 0;
  bool offload = false;
  bool mixed = false;            // mixed<bf16|fp16>: a 16-bit gradient wire
  int state_slots = 2;           // optimizer moments per param (AdamW: 2)
  bool device = false;           // a device trainer: 16-bit compute params when mixed; offload
                                 // stages copies through host memory
  bool offload_params = false;   // ZeRO-3's param shard in host memory (a device trainer only)
  std::size_t bucket_elems = 0;  // trainer_options::bucket_elems
  std::vector<std::size_t> pipeline_cuts;
};

// What a rank of pipeline stage `stage` holds, activations given; m is the model as that
// rank builds it (its tensor-parallel slice). Also this stage's layers [first, end).
template <class Model>
memory_report plan_memory(Model& m, const plan_layout& l, int stage, std::size_t activation_bytes,
                          std::pair<std::size_t, std::size_t>* layers = nullptr) {
  assign_names(m);
  const flat_layout layout = flat_layout::of(m);
  std::vector<std::size_t> sizes;
  for (const auto& seg : layout.segments()) sizes.push_back(seg.used);
  const auto range = stage_layer_range(sizes, l.pipeline_cuts, l.pp, stage);
  if (layers) *layers = range;
  const bucket_plan plan(layout, l.dp, l.bucket_elems, range.first, range.second);
  const bool split = l.device && l.offload;
  return detail::state_sizes::of(plan, l.zero_stage, l.state_slots, l.mixed, split, l.device && l.offload_params)
      .report(l.mixed ? 2 : 4, split, l.offload, activation_bytes, l.device && l.mixed ? 2 : 4);
}

// What a device rank takes beyond its report's device part, for a plan. Measured on an
// H200 (CUDA 13.0, driver 580, NCCL 2.28.3; scripts/gpu-check's cuda.device_memory and
// the 0.5B run, 2026-12-04) where a figure says so; the rest are estimates.
//   context    524 MiB, measured (523.6: NVML's used memory of the device before and after
//              select_device makes the context): the local memory reserved for every
//              thread the device can hold (1 KiB of stack x 132 SMs x 2,048 threads =
//              264 MiB), the device heap and printf buffer, the driver's state and code.
//   cuBLAS      64 MiB, measured (used memory around the engine's cublasCreate): the
//              workspace pool it allocates when none is set, and the handle's state.
//   comm        NCCL: 484 MiB for a communicator of one rank, measured (968 MiB around the
//              data and tensor communicators of a one-GPU run: NCCL sets up its channels'
//              buffers and its proxy even where every collective is a copy); of more
//              ranks, add the buffers of its connections, made at the first collective
//              (NCCL_RUNTIME_CONNECT): 4 MiB (Simple, NCCL_BUFFSIZE) + about 4.5 MiB
//              (LL128) + 0.25 MiB (LL) per channel and peer it receives from, ring and
//              tree over up to 32 channels on NVLink: about 512 MiB, an estimate (the lent
//              machines have one GPU). The trainer makes data and tensor ones and, at
//              pp > 1, two pipeline links of two ranks (sends and receives only: counted as
//              larger ones, an upper estimate). With STRATA_DEVICE_COMM=mpi none of this is
//              on the device (its staging is pinned host memory): the plan then overstates.
//   first use  256 MiB: device_allowance::first_use (space/device_memory.hpp), an estimate
//              (the 0.5B run left 39.9 MiB unattributed).
struct device_plan_allowance {
  std::size_t context = 0, cublas = 0, comms = 0, first_use = 0;
  std::size_t total() const noexcept { return context + cublas + comms + first_use; }
};
inline device_plan_allowance plan_device_allowance(const plan_layout& l) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  const auto comm = [&](int ranks) { return ranks > 1 ? (484 + 512) * mib : 484 * mib; };
  return {524 * mib, 64 * mib, comm(l.dp) + comm(l.tp) + (l.pp > 1 ? 2 * comm(2) : 0), device_allowance::first_use};
}

}  // namespace strata
