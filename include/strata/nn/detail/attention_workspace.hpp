// How much device memory the fused attention's backward borrows, and how it is kept under
// a limit. cuDNN's deterministic backward sums dQ in a fixed order through a workspace of
// the scores' gradient, 2 bytes for each (batch row, query head, query row, key row) with
// the rows rounded up to its tiles: B·H·S² bytes grow to 15 GB at S = 8192. The backward
// therefore runs over chunks of batch rows and of key/value heads (each with its query
// heads) whose workspace fits the limit: STRATA_ATTENTION_WORKSPACE_MIB, 1024 MiB unless
// set. The chunk depends on the shape and the limit only, so a run's bits repeat; each
// (batch row, head) is its own problem to cuDNN, so a chunk changes no more than the
// summation order of another engine choice (tests/cuda/nn_transformer.cu: the normwise
// bound, and whether the bits differ, printed). Host code: the memory plan counts the
// same bytes.
#pragma once
#include <cstdint>
#include <cstdlib>

#include "../../core/error.hpp"
#include "attention_layout.hpp"

namespace strata::nn::detail {

// STRATA_ATTENTION_WORKSPACE_MIB's value (null or empty: unset) in bytes.
inline std::int64_t parse_attention_workspace_mib(const char* s) {
  if (!s || !*s) return std::int64_t{1024} << 20;
  char* end = nullptr;
  const long long mib = std::strtoll(s, &end, 10);
  expects<config_error>(end && *end == '\0' && mib > 0 && mib < (std::int64_t{1} << 40), [&] {
    return cat("STRATA_ATTENTION_WORKSPACE_MIB=\"", s, "\" is not a positive whole number of MiB");
  });
  return static_cast<std::int64_t>(mib) << 20;
}

}  // namespace strata::nn::detail

namespace strata::nn {

// The most bytes the fused attention's backward borrows at once: STRATA_ATTENTION_WORKSPACE_MIB
// (a positive number of MiB), else 1 GiB. Read once.
inline std::int64_t attention_workspace_limit() {
  static const std::int64_t bytes =
      detail::parse_attention_workspace_mib(std::getenv("STRATA_ATTENTION_WORKSPACE_MIB"));
  return bytes;
}

}  // namespace strata::nn

namespace strata::nn::detail {

// A part of the backward: `batch` batch rows by `kv_heads` key/value heads (and their
// group x kv_heads query heads). batch divides B and kv_heads divides H / group.
struct attention_chunk {
  std::int64_t batch, kv_heads;
  bool operator==(const attention_chunk&) const = default;
};

inline attention_chunk whole(const attention_layout& l) { return {l.B, l.H / l.group}; }

// Chunk c's workspace: the scores' gradient in 16 bits, query rows in tiles of 64 and key
// rows in tiles of 128 (Hopper's: the larger of cuDNN's counts), and the frontend's own
// float per query row (the softmax sums it adds to every backward's workspace).
inline std::int64_t attention_workspace_bytes(const attention_layout& l, attention_chunk c) {
  const std::int64_t rows = (l.S + 63) / 64 * 64, keys = (l.S + 127) / 128 * 128;
  return c.batch * c.kv_heads * l.group * (rows * keys * 2 + l.S * 4);
}

// Whether cuDNN can run chunk c's pieces: each starts at 16 bytes (the alignment its
// plans assume; q, k, v and the output move by whole rows or heads of a multiple of 8
// 16-bit elements, the statistics, floats [B, H, S], by chunk x S), and each piece's
// statistics are one packed block (cuDNN before 9.26 reads them no other way), so a
// chunk of heads has one batch row.
inline bool attention_chunk_valid(const attention_layout& l, attention_chunk c) {
  const std::int64_t KV = l.H / l.group;
  if (c.kv_heads != KV && c.batch != 1) return false;
  return (c.batch == l.B || c.batch * l.H * l.S % 4 == 0) && (c.kv_heads == KV || c.kv_heads * l.group * l.S % 4 == 0);
}

// The valid chunk with the largest workspace within limit, else the valid one with the
// smallest: all key/value heads of as many batch rows as fit, or of one row as many
// key/value heads as fit.
inline attention_chunk attention_backward_chunk(const attention_layout& l, std::int64_t limit) {
  const std::int64_t KV = l.H / l.group;
  attention_chunk best = whole(l);
  std::int64_t best_bytes = attention_workspace_bytes(l, best);
  for (std::int64_t k = KV; k >= 1; --k)
    for (std::int64_t b = l.B; b >= 1; --b) {
      const attention_chunk c{b, k};
      if (l.B % b != 0 || KV % k != 0 || !attention_chunk_valid(l, c)) continue;
      const std::int64_t bytes = attention_workspace_bytes(l, c);
      const bool better = best_bytes > limit ? bytes < best_bytes : bytes <= limit && bytes > best_bytes;
      if (better) best = c, best_bytes = bytes;
    }
  return best;
}

}  // namespace strata::nn::detail

namespace strata::nn {

// The fused backward's workspace for `rows` batch rows of `seq` tokens over `heads` query
// heads in `kv_heads` groups, within `limit` (the memory plan's count).
inline std::int64_t fused_attention_workspace_bytes(std::int64_t rows, std::int64_t seq, std::int64_t heads,
                                                    std::int64_t kv_heads,
                                                    std::int64_t limit = attention_workspace_limit()) {
  const detail::attention_layout l{rows, seq, heads, 0, heads / kv_heads, 0, 0, 0, 0};
  return detail::attention_workspace_bytes(l, detail::attention_backward_chunk(l, limit));
}

}  // namespace strata::nn
