// grid: the processes split into tensor x data x pipeline groups (Megatron order), with a
// sub-communicator per axis and one for data x tensor, all made with the world's split().
#pragma once
#include <string>
#include <utility>

#include "communicator.hpp"
#include "detail/grid_layout.hpp"
#include "grid_dims.hpp"

namespace strata {

template <class C>
class grid {
  static_assert(detail::check_communicator<C>());

 public:
  // Collective over `world`, which must outlive the grid. A grid that does not fit the
  // world is a config_error on every rank before any communication.
  grid(C& world, grid_dims dims = {})
      : world_(&world),
        layout_(detail::grid_layout::make(world.size(), dims)),
        me_(layout_.coords_of(world.rank())),
        tensor_(sub(world, me_.dp + layout_.dp * me_.pp, me_.tp, "tensor")),
        data_(sub(world, me_.tp + layout_.tp * me_.pp, me_.dp, "data")),
        pipeline_(sub(world, me_.tp + layout_.tp * me_.dp, me_.pp, "pipeline")),
        data_tensor_(sub(world, me_.pp, me_.tp + layout_.tp * me_.dp, "data_tensor")) {}

  C& world() { return *world_; }
  C& tensor() { return tensor_; }
  C& data() { return data_; }
  C& pipeline() { return pipeline_; }
  C& data_tensor() { return data_tensor_; }

  int tp_rank() const { return me_.tp; }
  int dp_rank() const { return me_.dp; }
  int pp_rank() const { return me_.pp; }
  int tp_size() const { return layout_.tp; }
  int dp_size() const { return layout_.dp; }
  int pp_size() const { return layout_.pp; }
  const detail::grid_layout& layout() const { return layout_; }

 private:
  // color picks the group, key orders it by the coordinate on the axis, so a sub-
  // communicator's rank is that coordinate.
  static C sub(C& world, int color, int key, const char* axis) {
    C c = world.split(color, key);
    if constexpr (requires { c.set_name(std::string()); }) c.set_name(axis);
    return c;
  }

  C* world_;
  detail::grid_layout layout_;
  detail::grid_layout::coords me_;
  C tensor_, data_, pipeline_, data_tensor_;
};

template <class C>
grid(C&, grid_dims) -> grid<C>;

}  // namespace strata
