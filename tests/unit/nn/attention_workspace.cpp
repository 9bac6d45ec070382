// The fused attention's backward workspace (nn/detail/attention_workspace.hpp): the chunk of
// batch rows and key/value heads a GPU's backward runs at a time keeps cuDNN's workspace of
// the scores' gradient within the limit where an aligned chunk can, divides the layout,
// starts each piece at 16 bytes with its statistics packed, and is the whole layout where
// that fits. The memory plan
// counts the same bytes; the limit's variable is checked.
#include <cstdint>
#include <string>

#include <strata/nn/detail/attention_workspace.hpp>

#include "catch.hpp"

namespace sd = strata::nn::detail;

namespace {

constexpr std::int64_t MiB = std::int64_t{1} << 20;

// Qwen2's separate q, k, v: H query heads over KV key/value heads of size 64.
sd::attention_layout qwen(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t KV) {
  return {B, S, H, 64, H / KV, H * 64, 64, KV * 64, 64};
}

// What every chunk must be: a divisor of batch rows and key/value heads, aligned, a chunk
// of heads one batch row.
void require_valid(const sd::attention_layout& l, sd::attention_chunk c) {
  REQUIRE(c.batch >= 1);
  REQUIRE(c.kv_heads >= 1);
  CHECK(l.B % c.batch == 0);
  CHECK((l.H / l.group) % c.kv_heads == 0);
  CHECK(sd::attention_chunk_valid(l, c));
  if (c.kv_heads != l.H / l.group) CHECK(c.batch == 1);
  // Each piece's statistics start at a multiple of 4 floats (16 bytes).
  for (std::int64_t b = 0; b < l.B; b += c.batch)
    for (std::int64_t g = 0; g < l.H / l.group; g += c.kv_heads) CHECK((b * l.H + g * l.group) * l.S % 4 == 0);
}

}  // namespace

TEST_CASE("attention workspace: the scores' gradient in 16 bits over cuDNN's tiles, and a float a row") {
  // Qwen2.5-0.5B at 8 x 1024: 8 rows x 14 heads x (1024 x 1024 x 2 bytes + 1024 floats),
  // 224 MiB and 448 KiB.
  CHECK(sd::attention_workspace_bytes(qwen(8, 1024, 14, 2), {8, 2}) == 224 * MiB + 8 * 14 * 1024 * 4);
  // Query rows round up to 64, key rows to 128: 100 -> 128 x 128; 65 -> 128 x 128.
  CHECK(sd::attention_workspace_bytes(qwen(1, 100, 2, 1), {1, 1}) == 2 * (128 * 128 * 2 + 100 * 4));
  CHECK(sd::attention_workspace_bytes(qwen(1, 65, 1, 1), {1, 1}) == 128 * 128 * 2 + 65 * 4);
  CHECK(sd::attention_workspace_bytes(qwen(1, 64, 1, 1), {1, 1}) == 64 * 128 * 2 + 64 * 4);
  // A chunk counts its own rows and heads (a group of 7 query heads per key/value head).
  CHECK(sd::attention_workspace_bytes(qwen(8, 1024, 14, 2), {1, 1}) == 7 * (2 * MiB + 1024 * 4));
}

TEST_CASE("attention workspace: the whole layout where it fits, else the largest chunk within the limit") {
  const std::int64_t limit = 1024 * MiB;
  // 224 MiB: whole.
  CHECK(sd::attention_backward_chunk(qwen(8, 1024, 14, 2), limit) == sd::attention_chunk{8, 2});
  // S 4096: 448 MiB (and 224 KiB) a batch row, so two rows, all heads.
  const auto l4k = qwen(8, 4096, 14, 2);
  const auto c4k = sd::attention_backward_chunk(l4k, limit);
  CHECK(c4k == sd::attention_chunk{2, 2});
  CHECK(sd::attention_workspace_bytes(l4k, c4k) == 2 * 14 * (32 * MiB + 4096 * 4));
  // S 8192: one batch row is 1,792 MiB (14 GiB whole); one key/value head's 7 query heads 896 MiB.
  const auto l8k = qwen(8, 8192, 14, 2);
  CHECK(sd::attention_workspace_bytes(l8k, sd::whole(l8k)) == 8 * 14 * (128 * MiB + 8192 * 4));
  const auto c8k = sd::attention_backward_chunk(l8k, limit);
  CHECK(c8k == sd::attention_chunk{1, 1});
  CHECK(sd::attention_workspace_bytes(l8k, c8k) == 7 * (128 * MiB + 8192 * 4));
  // Too large at one row and one head: the smallest there is, over the limit.
  CHECK(sd::attention_backward_chunk(qwen(2, 32768, 14, 2), limit) == sd::attention_chunk{1, 1});
  // A chunk of heads has one batch row: 4 heads in 4 groups, 2 rows; within 2 (row, head)
  // pairs, 2 heads of one row (not one head of 2 rows); within 4 or 6, one row.
  const auto rows2 = qwen(2, 1024, 4, 4);
  const std::int64_t pair = sd::attention_workspace_bytes(rows2, {1, 1});
  CHECK(pair == 2 * MiB + 1024 * 4);
  CHECK(sd::attention_backward_chunk(rows2, 2 * pair) == sd::attention_chunk{1, 2});
  CHECK(sd::attention_backward_chunk(rows2, 4 * pair) == sd::attention_chunk{1, 4});
  CHECK(sd::attention_backward_chunk(rows2, 6 * pair) == sd::attention_chunk{1, 4});
  CHECK(sd::attention_backward_chunk(rows2, 2 * pair - 1) == sd::attention_chunk{1, 1});
  CHECK_FALSE(sd::attention_chunk_valid(rows2, {2, 1}));
  // 12 heads of their own at 8192: a row is 1,536 MiB, 6 heads of one row 768.
  CHECK(sd::attention_backward_chunk(qwen(2, 8192, 12, 12), limit) == sd::attention_chunk{1, 6});
}

TEST_CASE("attention workspace: pieces start at 16 bytes, so an odd sequence may keep the whole layout") {
  // S 77 and 14 heads: a batch row's statistics are 1,078 floats (not a multiple of 4), and
  // a key/value head's 7 x 77 = 539: no chunk but the whole layout is aligned.
  const auto odd = qwen(3, 77, 14, 2);
  CHECK_FALSE(sd::attention_chunk_valid(odd, {1, 2}));
  CHECK_FALSE(sd::attention_chunk_valid(odd, {3, 1}));
  CHECK_FALSE(sd::attention_chunk_valid(odd, {1, 1}));
  CHECK(sd::attention_backward_chunk(odd, 1) == sd::whole(odd));
  // S 100 with 4 heads over 2: every piece is aligned, so the smallest is one row, one group.
  CHECK(sd::attention_backward_chunk(qwen(2, 100, 4, 2), 1) == sd::attention_chunk{1, 1});
  // S 78 with 2 heads: a row (156 floats) is aligned, a head (78) is not.
  const auto even = qwen(4, 78, 2, 2);
  CHECK(sd::attention_backward_chunk(even, 1) == sd::attention_chunk{1, 2});
}

TEST_CASE(
    "attention workspace: every chunk chosen divides the layout, is aligned and within the limit where it can be") {
  for (std::int64_t B : {1, 2, 3, 4, 6, 8, 12})
    for (std::int64_t S : {1, 63, 77, 128, 1000, 2048, 8192})
      for (auto [H, KV] : {std::pair<std::int64_t, std::int64_t>{14, 2}, {12, 12}, {8, 8}, {32, 8}, {3, 1}})
        for (std::int64_t limit : {std::int64_t{1}, 64 * MiB, 1024 * MiB, 16384 * MiB}) {
          const auto l = qwen(B, S, H, KV);
          INFO("B " << B << " S " << S << " H " << H << " KV " << KV << " limit " << limit);
          const auto c = sd::attention_backward_chunk(l, limit);
          require_valid(l, c);
          const std::int64_t bytes = sd::attention_workspace_bytes(l, c);
          // Over the limit only where even the smallest aligned piece would be.
          if (bytes > limit) {
            for (std::int64_t b = 1; b <= B; ++b)
              for (std::int64_t k = 1; k <= KV; ++k)
                if (B % b == 0 && KV % k == 0 && sd::attention_chunk_valid(l, {b, k}))
                  CHECK(sd::attention_workspace_bytes(l, {b, k}) >= bytes);
          }
          if (sd::attention_workspace_bytes(l, sd::whole(l)) <= limit) CHECK(c == sd::whole(l));
          CHECK(strata::nn::fused_attention_workspace_bytes(B, S, H, KV, limit) == bytes);
        }
}

TEST_CASE("attention workspace: STRATA_ATTENTION_WORKSPACE_MIB is a positive whole number of MiB") {
  CHECK(sd::parse_attention_workspace_mib(nullptr) == 1024 * MiB);
  CHECK(sd::parse_attention_workspace_mib("") == 1024 * MiB);
  CHECK(sd::parse_attention_workspace_mib("256") == 256 * MiB);
  for (const char* bad : {"0", "-5", "1.5", "12 MiB", "lots"}) {
    INFO(bad);
    CHECK_THROWS_AS(sd::parse_attention_workspace_mib(bad), strata::config_error);
    CHECK_THROWS_WITH(sd::parse_attention_workspace_mib(bad),
                      strata_test::contains_text("STRATA_ATTENTION_WORKSPACE_MIB=\"" + std::string(bad) + "\""));
  }
}
