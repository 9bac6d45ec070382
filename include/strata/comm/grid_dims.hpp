// grid_dims: the axis sizes a program asks of the process grid (strata::grid in
// comm/grid.hpp); the arithmetic that checks and applies them is detail/grid_layout.hpp.
#pragma once

namespace strata {

// Sizes of the grid axes; data = 0 means world / (tensor * pipeline).
struct grid_dims {
  int tensor = 1;
  int pipeline = 1;
  int data = 0;
};

}  // namespace strata
