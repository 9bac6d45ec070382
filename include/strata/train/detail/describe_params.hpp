// What a checkpoint records of a stage's params: names, shapes, tensor-parallel slices
// and where each sits in the padded flat buffer, plus every param of the model (all
// stages) so that a load can check it is the same model.
#pragma once
#include <cstddef>
#include <vector>

#include "../../io/checkpoint.hpp"
#include "../../model/layout.hpp"
#include "../../model/param.hpp"

namespace strata::detail {

inline void describe_params(checkpoint_state& st, const flat_layout& layout, const std::vector<param<float>*>& all,
                            const std::vector<std::size_t>& padded_offset, const std::vector<std::size_t>& mine) {
  for (std::size_t i : mine) {
    const param<float>& p = *all[i];
    st.names.push_back(layout.params()[i].name);
    st.shapes.push_back(layout.params()[i].shape);
    st.full_shapes.push_back(p.sharded() ? p.full_shape : p.shape);
    st.shard_dims.push_back(p.sharded() ? p.shard_dim : -1);
    st.shard_offsets.push_back(p.sharded() ? p.shard_offset : 0);
    st.param_offset.push_back(padded_offset[i]);
  }
  for (const auto* p : all) {
    st.model_names.push_back(p->name);
    st.model_full_shapes.push_back(p->sharded() ? p->full_shape : p->shape);
  }
}

}  // namespace strata::detail
