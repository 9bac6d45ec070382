// The trainer's state as a checkpoint sees it (io/checkpoint.hpp's checkpoint_state): the
// model's params and their place in this layout, this rank's master and moment arrays
// (on the host), and the step counters; saved, or loaded from any layout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../io/checkpoint.hpp"
#include "../../model/layout.hpp"
#include "../../model/param.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "stage_params.hpp"
#include "trainer_types.hpp"

namespace strata::detail {

template <class Types, class Optimizer>
class checkpoint_view {
  static constexpr int stage = Types::stage;

 public:
  checkpoint_view(typename Types::grid_t& grid, const flat_layout& layout, const stage_params& params,
                  const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev)
      : grid_(grid), layout_(layout), params_(params), plan_(plan), state_(state), dev_(dev) {}

  // Collective over the grid's world.
  void save(const std::filesystem::path& dir, nlohmann::json extra, const checkpoint_options& o,
            const step_counters& counters, std::uint64_t seed) {
    state_.with_host(*dev_.eng, false, [&](float* master, float* s0, float* s1) {
      auto st = view(master, s0, s1, counters, seed);
      st.extra = std::move(extra);
      save_checkpoint(grid_.world(), grid_.data(), st, dir, o);
    });
  }

  // Collective over the grid's world: fills master and moments; the saved step counters
  // and user data are in the state returned.
  checkpoint_state load(const std::filesystem::path& dir, const step_counters& counters, std::uint64_t seed) {
    checkpoint_state st;
    state_.with_host(*dev_.eng, true, [&](float* master, float* s0, float* s1) {
      st = view(master, s0, s1, counters, seed);
      load_checkpoint(grid_.world(), st, dir);
    });
    return st;
  }

 private:
  checkpoint_state view(float* master, float* state0, float* state1, const step_counters& counters,
                        std::uint64_t seed) {
    checkpoint_state st;
    describe_params(st);
    st.plan = &plan_;
    st.optimizer = Optimizer::name;
    st.precision = Types::precision::name;
    st.state_slots = Optimizer::state_slots;
    st.stage = stage;
    st.dp_rank = grid_.data().rank();
    st.dp_size = grid_.data().size();
    st.tp = grid_.tp_size();
    st.pp = grid_.pp_size();
    st.tp_rank = grid_.tp_rank();
    st.pp_rank = grid_.pp_rank();
    st.replicated_master = stage == 0;
    st.arrays[0] = master;
    st.arrays[1] = state0;
    st.arrays[2] = state1;
    st.owned = state_.master.size();
    st.for_each_owned = [this](std::size_t lo, std::size_t hi,
                               const std::function<void(std::size_t, std::size_t, std::size_t)>& f) {
      state_.for_each_master_range(plan_, stage, lo, hi, f);
    };
    st.step = counters.step;
    st.skipped = counters.skipped;
    st.scaler = counters.scaler.save();
    st.seed = seed;
    return st;
  }

  // This stage's params (names, shapes, tensor-parallel slices, padded offsets), and
  // every param of the model (all stages), so that a load can check it is the same model.
  void describe_params(checkpoint_state& st) const {
    for (std::size_t i : params_.mine) {
      const param<float>& p = *params_.all[i];
      st.names.push_back(layout_.params()[i].name);
      st.shapes.push_back(layout_.params()[i].shape);
      st.full_shapes.push_back(p.sharded() ? p.full_shape : p.shape);
      st.shard_dims.push_back(p.sharded() ? p.shard_dim : -1);
      st.shard_offsets.push_back(p.sharded() ? p.shard_offset : 0);
      st.param_offset.push_back(params_.offset[i]);
    }
    for (const auto* p : params_.all) {
      st.model_names.push_back(p->name);
      st.model_full_shapes.push_back(p->sharded() ? p->full_shape : p->shape);
    }
  }

  typename Types::grid_t& grid_;
  const flat_layout& layout_;
  const stage_params& params_;
  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
};

}  // namespace strata::detail
