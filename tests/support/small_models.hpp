// The small Qwen2 shape the model tests share (host and device): 2 layers of width 32,
// 4 query heads over 2 key/value heads (grouped), a 48-token vocabulary.
#pragma once
#include <strata/models/qwen2.hpp>

namespace test {

inline strata::models::qwen2_config small_qwen2_config() {
  strata::models::qwen2_config cfg;
  cfg.vocab_size = 48;
  cfg.hidden_size = 32;
  cfg.intermediate_size = 48;
  cfg.num_hidden_layers = 2;
  cfg.num_attention_heads = 4;
  cfg.num_key_value_heads = 2;
  cfg.max_position_embeddings = 16;
  return cfg;
}

}  // namespace test
