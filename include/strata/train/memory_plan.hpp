// Memory before launch: the bytes one rank of a layout will hold for a model, by the
// categories of trainer::memory(), from the model's shapes alone (no weights allocated).
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

}  // namespace strata
