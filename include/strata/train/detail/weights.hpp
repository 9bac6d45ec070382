// The weights as whole tensors: initialised from each param's init_spec, set from full
// tensors (a file), gathered back into full tensors in model order. A rank touches only
// the master elements it holds; tensor-parallel slices map through param::global_index.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "../../comm/reduce_op.hpp"
#include "../../core/error.hpp"
#include "../../core/function_ref.hpp"
#include "../../model/layout.hpp"
#include "../../model/param.hpp"
#include "../../model/weight_piece.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../init.hpp"
#include "consolidate.hpp"
#include "io_staging.hpp"
#include "param_gathers.hpp"
#include "shard_update.hpp"
#include "stage_params.hpp"
#include "tied_params.hpp"

namespace strata::detail {

// read(param, first element, out): fills out from that param's full tensor.
using weight_read_fn = function_ref<void(const param_slot&, std::size_t, std::span<float>)>;

// Not templated on the optimizer, nor on the callbacks (function_ref): a program that
// dispatches over policies compiles these walks once per space, stage and precision.
template <class Types>
class trainer_weights {
  static constexpr int stage = Types::stage;

 public:
  trainer_weights(typename Types::grid_t& grid, const flat_layout& layout, const stage_params& params,
                  const bucket_plan& plan, typename Types::state_t& state, typename Types::dev_t& dev,
                  param_gathers<Types>& gathers, const tied_params<Types>& ties)
      : grid_(grid),
        layout_(layout),
        params_(params),
        plan_(plan),
        state_(state),
        dev_(dev),
        gathers_(gathers),
        ties_(ties) {}

  // Each element from (seed, param name, index in the full tensor): every layout starts
  // from the same weights. A tied param starts as its source (that name, that init).
  void initialise(std::uint64_t seed) {
    std::vector<std::uint64_t> keys(layout_.params().size());
    for (std::size_t i : params_.mine) keys[i] = init_key(seed, layout_.params()[ties_.value_source(i)].name);
    std::vector<init_spec> specs(layout_.params().size());
    for (std::size_t i : params_.mine) specs[i] = layout_.params()[ties_.value_source(i)].init;
    fill_master([&](std::size_t i, std::size_t global) { return init_value(specs[i], keys[i], global); });
  }

  // From the whole model's full tensors in parameter order, as gather() returns them; a
  // tied param takes its source's values.
  void set(std::span<const float> full) {
    std::vector<std::size_t> base(params_.all.size() + 1, 0);
    for (std::size_t i = 0; i < params_.all.size(); ++i) {
      const param<float>& p = *params_.all[i];
      base[i + 1] = base[i] + (p.sharded() ? p.full_shape.numel() : p.numel());
    }
    expects<config_error>(full.size() == base.back(), [&] {
      return cat("strata::trainer::set_weights: ", full.size(), " values for a model of ", base.back());
    });
    fill_master([&](std::size_t i, std::size_t global) { return full[base[ties_.value_source(i)] + global]; });
  }

  // From a reader of full tensors: read(slot, first, out) fills out with elements [first,
  // first + out.size()) of the full tensor of the param `slot` describes (row-major). A
  // rank asks only for what it holds, in runs contiguous in the full tensor; a tied
  // param asks for its source's.
  void set_from(weight_read_fn read) {
    for_each_run([&](std::size_t i, std::size_t first, std::span<float> out) {
      read(layout_.params()[ties_.value_source(i)], first, out);
    });
  }

  // The fp32 master weights of the whole model (collective over the grid): this stage's
  // from the data-parallel pieces, then tensor slices assembled and stages concatenated.
  std::vector<float> gather() {
    std::vector<float> full_padded(plan_.total());
    state_.with_host_master(*dev_.eng, false, [&](float* master) {
      if constexpr (stage == 0) {
        for (const auto& bk : plan_.buckets())
          std::copy_n(master + bk.replica_offset, bk.size, full_padded.begin() + bk.offset);
      } else {
        for (const auto& bk : plan_.buckets()) {
          if (bk.size == 0) continue;
          grid_.data().all_gather(std::span<const float>(master + bk.shard_offset, bk.piece),
                                  std::span<float>(full_padded.data() + bk.offset, bk.size));
        }
      }
    });
    std::vector<float> mine;
    std::vector<const param<float>*> params;
    for (std::size_t i : params_.mine) {
      const float* p = full_padded.data() + params_.offset[i];
      mine.insert(mine.end(), p, p + layout_.params()[i].numel);
      params.push_back(params_.all[i]);
    }
    return concat_stages(grid_.pipeline(), gather_tensor_slices(grid_.tensor(), params, mine));
  }

  // The values gather() returns, in pieces and in the same order: f(param index, first,
  // values) with elements [first, first + values.size()) of that param's full tensor, at
  // most `piece` of them, on every rank (collective over the grid's world). A rank holds
  // one piece beyond its own state, never the whole model. Each element comes from the
  // ranks that hold it (equal bits where several do), assembled by a max over the bit
  // patterns widened to 64 bits: exact, negative zeros and NaNs included.
  void for_each_piece(weight_piece_fn f, std::size_t piece = weight_piece_elems) {
    std::vector<bool> here(layout_.params().size(), false);
    for (std::size_t i : params_.mine) here[i] = true;
    struct held {
      std::size_t first, at, len;
    };
    std::vector<held> runs;
    std::vector<std::uint64_t> bits;
    std::vector<float> values;
    state_.with_host_master(*dev_.eng, false, [&](float* master) {
      for (std::size_t i = 0; i < layout_.params().size(); ++i) {
        const param<float>& p = *params_.all[i];
        const std::size_t n = p.sharded() ? p.full_shape.numel() : p.numel();
        runs.clear();
        if (here[i])
          for_each_held_run(
              i, [&](std::size_t first, std::size_t at, std::size_t len) { runs.push_back({first, at, len}); });
        for (std::size_t c0 = 0; c0 < n; c0 += piece) {
          const std::size_t c1 = std::min(n, c0 + piece);
          bits.assign(c1 - c0, 0);
          for (const held& r : runs) {
            const std::size_t s = std::max(r.first, c0), e = std::min(r.first + r.len, c1);
            for (std::size_t k = s; k < e; ++k) {
              std::uint32_t b;
              std::memcpy(&b, master + r.at + (k - r.first), 4);
              bits[k - c0] = b;
            }
          }
          grid_.world().all_reduce(std::span<std::uint64_t>(bits), reduce_op::max);
          values.resize(bits.size());
          for (std::size_t k = 0; k < bits.size(); ++k) {
            const auto b = static_cast<std::uint32_t>(bits[k]);
            std::memcpy(&values[k], &b, 4);
          }
          f(i, c0, std::span<const float>(values));
        }
      }
    });
  }

 private:
  // Sets each master element this rank holds to value(param index, index in the full
  // tensor), then the compute params from master.
  template <class F>
  void fill_master(F&& value) {
    for_each_run([&](std::size_t i, std::size_t first, std::span<float> out) {
      for (std::size_t k = 0; k < out.size(); ++k) out[k] = value(i, first + k);
    });
  }

  // f(param index, first, out) for the master elements this rank holds, in runs that are
  // contiguous in the param's full tensor (out is their place in the master copy), then
  // the compute params from master.
  template <class F>
  void for_each_run(F&& f) {
    state_.with_host_master(*dev_.eng, true, [&](float* master) {
      for (std::size_t i : params_.mine)
        for_each_held_run(i, [&](std::size_t first, std::size_t at, std::size_t len) {
          f(i, first, std::span<float>(master + at, len));
        });
    });
    refresh_compute_params<Types>(state_, dev_, gathers_);
    gathers_.invalidate();
  }

  // g(first, at, len) for the master elements of param i (of this stage) this rank
  // holds, in runs contiguous both in the param's full tensor (from first) and in the
  // master copy (from at).
  template <class G>
  void for_each_held_run(std::size_t i, G&& g) const {
    const param<float>& p = *params_.all[i];
    const std::size_t lo = params_.offset[i], hi = lo + layout_.params()[i].numel;
    state_.for_each_master_range(plan_, stage, lo, hi, [&](std::size_t padded, std::size_t at, std::size_t n) {
      for (std::size_t j = 0; j < n;) {
        const std::size_t first = p.global_index(padded - lo + j);
        std::size_t len = 1;
        while (j + len < n && p.global_index(padded - lo + j + len) == first + len) ++len;
        g(first, at + j, len);
        j += len;
      }
    });
  }

  typename Types::grid_t& grid_;
  const flat_layout& layout_;
  const stage_params& params_;
  const bucket_plan& plan_;
  typename Types::state_t& state_;
  typename Types::dev_t& dev_;
  param_gathers<Types>& gathers_;
  const tied_params<Types>& ties_;
};

}  // namespace strata::detail
