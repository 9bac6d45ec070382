// Which layers and params this pipeline stage owns, and where each of its params sits in
// the padded flat buffer of the bucket plan: the index the other parts of the trainer
// body walk to bind pointers, fill master weights and describe checkpoints.
#pragma once
#include <cstddef>
#include <tuple>
#include <vector>

#include "../../core/error.hpp"
#include "../../model/layout.hpp"
#include "../../model/param.hpp"
#include "../../parallel/bucket_plan.hpp"
#include "../../parallel/pipeline.hpp"

namespace strata::detail {

struct stage_params {
  std::size_t first_layer = 0, end_layer = 0;  // this stage's layers [first, end) in model order
  std::vector<std::size_t> offset;             // per param, layout order: padded offset (0 off this stage)
  std::vector<std::size_t> layer_first;        // per layer: its first param; one more entry at the end
  std::vector<std::size_t> mine;               // this stage's params
  std::vector<param<float>*> all;              // every stage's params, layout order

  // Balanced by parameter count, or at the given cuts (trainer_options::pipeline_cuts).
  void choose_layers(const flat_layout& layout, const std::vector<std::size_t>& cuts, int stages, int stage) {
    std::vector<std::size_t> sizes;
    for (const auto& seg : layout.segments()) sizes.push_back(seg.used);
    std::tie(first_layer, end_layer) = stage_layer_range(sizes, cuts, stages, stage);
  }

  // Walks the layer table's params, which must come in the layout's order, once the
  // plan of this stage's layers is made.
  template <class Table>
  void collect(const Table& table, const flat_layout& layout, const bucket_plan& plan) {
    std::size_t i = 0;
    for (std::size_t l = 0; l < table.size(); ++l) {
      layer_first.push_back(i);
      for (auto* p : table[l].params) {
        expects(i < layout.params().size() && p->name == layout.params()[i].name,
                "strata::trainer: the layer walk and the flat layout disagree on the param order");
        all.push_back(p);
        const bool here = l >= first_layer && l < end_layer;
        offset.push_back(here ? plan.to_padded(layout.params()[i].offset) : 0);
        if (here) mine.push_back(i);
        ++i;
      }
    }
    layer_first.push_back(i);
  }

  // f(param, padded offset) for each param of layer l.
  template <class F>
  void for_each_in_layer(std::size_t l, F&& f) const {
    for (std::size_t i = layer_first[l]; i < layer_first[l + 1]; ++i) f(*all[i], offset[i]);
  }
};

}  // namespace strata::detail
