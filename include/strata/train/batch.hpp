// A training batch as the trainer takes it: this rank's rows of the global batch,
// split by the trainer into micro-batches along the first dimension.
#pragma once
#include "../space/tensor.hpp"

namespace strata {

template <class Space = host>
struct batch {
  tensor<float, Space> inputs;   // [rows, ...]; token ids and class ids as floats
  tensor<float, Space> targets;  // [rows] class ids, or [rows, F] values
};

}  // namespace strata
