// A training batch as the trainer takes it: this rank's rows of the global batch,
// split by the trainer into micro-batches along the first dimension.
#pragma once
#include "../core/error.hpp"
#include "../space/tensor.hpp"

namespace strata {

template <class Space = host>
struct batch {
  tensor<float, Space> inputs;   // [rows, ...]; token ids and class ids as floats
  tensor<float, Space> targets;  // [rows] class ids, or [rows, F] values
};

// A batch the trainer can split into `micro_batches` along its rows, with one target
// row per input row.
template <class Space>
void check_batch_rows(const batch<Space>& b, int micro_batches) {
  const std::int64_t rows = b.inputs.shape().rank ? b.inputs.dim(0) : 0;
  expects<config_error>(rows > 0 && rows % micro_batches == 0, [&] {
    return strata::cat("strata::trainer::step: the batch has ", rows, " rows, which ", micro_batches,
                       " micro-batches do not divide");
  });
  expects<config_error>(b.targets.shape().rank > 0 && b.targets.dim(0) == rows, [&] {
    return strata::cat("strata::trainer::step: targets have ", b.targets.shape().str(), " but inputs have ", rows,
                       " rows");
  });
}

}  // namespace strata
