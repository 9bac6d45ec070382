// Where a causal attention's q, k, v and output are in memory, shared by its unfused
// (attention_core.hpp) and fused (cudnn_attention.hpp) forms.
#pragma once
#include <cmath>
#include <cstdint>

namespace strata::nn::detail {

// Where q, k and v of (batch b, query head h) are: q at q + b S ldq + h q_head, k and v at
// k|v + b S ldkv + (h / group) kv_head, each an [S, hd] matrix with row stride ldq or
// ldkv; the output of the pair at out + b S H hd + h hd. H is this rank's query heads.
struct attention_layout {
  std::int64_t B, S, H, hd, group;
  std::int64_t ldq, q_head, ldkv, kv_head;
  std::int64_t ldo() const { return H * hd; }
};

inline float attention_scale(std::int64_t hd) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))); }

}  // namespace strata::nn::detail
