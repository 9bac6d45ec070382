// The tensor-parallel layers (Megatron's): column- and row-parallel linear, vocabulary-
// parallel embedding and cross-entropy, and the head fused with its loss. With tp_size 1
// each is its plain nn/ counterpart.
#pragma once
#include "column_parallel_linear.hpp"
#include "context.hpp"
#include "linear_cross_entropy.hpp"
#include "row_parallel_linear.hpp"
#include "vocab_parallel_cross_entropy.hpp"
#include "vocab_parallel_embedding.hpp"
