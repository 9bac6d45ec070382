// strata-gpu: any
// cuDNN's fused-attention graphs as strata declares them, checked by cuDNN itself without
// a GPU: the graphs of nn/detail/cudnn_attention.hpp pass the frontend's validate() for
// Hopper (sm_90) at the shapes tests/cuda/nn_transformer.cu runs on a GPU (grouped heads
// at sequences 100 and 77, the interleaved q|k|v at 128) and at Qwen2.5-0.5B's, the
// forward's statistics carry the uid its variant pack names, and a head size cuDNN cannot
// take (not a multiple of 8) is refused, which sends attention down the unfused path; the
// backward over a chunk of the layout (attention_workspace.hpp) validates too.
// Exits 77 (skipped) where the build has no cuDNN headers or the library cannot be loaded.
#include <cstdio>
#include <cstdlib>
#include <strata/cuda.cuh>

#include "catch.hpp"

#if STRATA_HAS_CUDNN

namespace {

namespace d = strata::nn::detail;
using attention = d::cudnn_attention;

// Layouts as the layers make them: Qwen2's separate q, k, v ([B, S, heads, hd]) and gpt's
// interleaved q|k|v rows ([B, S, 3, heads, hd]).
d::attention_layout separate(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t KV, std::int64_t hd) {
  return {B, S, H, hd, H / KV, H * hd, hd, KV * hd, hd};
}
d::attention_layout interleaved(std::int64_t B, std::int64_t S, std::int64_t H, std::int64_t hd) {
  return {B, S, H, hd, 1, 3 * H * hd, 3 * hd, 3 * H * hd, 3 * hd};
}

void require_loaded() {
  const std::string& why = attention::instance().unavailable();
  if (!why.empty()) {
    std::printf("cuDNN is not loaded (%s): skipped\n", why.c_str());
    std::exit(77);
  }
}

}  // namespace

TEST_CASE("cuDNN validates strata's attention graphs for sm_90, the statistics under their uid") {
  require_loaded();
  INFO("cuDNN " << attention::instance().version());
  for (const auto& l : {separate(2, 100, 4, 2, 64), separate(3, 77, 14, 2, 64), interleaved(2, 128, 3, 64),
                        separate(8, 1024, 14, 2, 64), separate(1, 64, 8, 8, 128)}) {
    INFO("B " << l.B << ", S " << l.S << ", H " << l.H << ", group " << l.group << ", hd " << l.hd);
    auto g = attention::graphs_of<strata::bf16>(l, 90);
    // Declared, not left to the frontend's uid assignment (which would pick the same
    // number today only because the uids before it are taken).
    REQUIRE(g.stats->has_uid());
    CHECK(g.stats->get_uid() == d::stats_uid);
    auto fwd = g.forward->validate();
    INFO(fwd.get_message());
    CHECK(fwd.is_good());
    CHECK(g.stats->get_uid() == d::stats_uid);
    auto bwd = g.backward->validate();
    INFO(bwd.get_message());
    CHECK(bwd.is_good());
  }
  auto half = attention::graphs_of<strata::fp16>(separate(2, 100, 4, 2, 64), 90);
  CHECK(half.forward->validate().is_good());
  CHECK(half.backward->validate().is_good());
}

// The backward of a chunk of batch rows and key/value heads (attention_workspace.hpp)
// reads the whole layout's strides: cuDNN takes those graphs too, at the chunks that
// long sequences get under the default limit and at the smallest chunks the GPU test forces.
TEST_CASE("cuDNN validates the backward over a chunk of batch rows and heads, the whole layout's strides") {
  require_loaded();
  const std::int64_t limit = std::int64_t{1024} << 20;
  struct case_t {
    d::attention_layout l;
    d::attention_chunk expected;
  };
  for (const auto& c : {case_t{separate(8, 8192, 14, 2, 64), {1, 1}}, case_t{separate(8, 4096, 14, 2, 64), {2, 2}},
                        case_t{separate(2, 8192, 12, 12, 64), {1, 6}}, case_t{interleaved(4, 4096, 12, 64), {2, 12}}}) {
    const auto& l = c.l;
    const auto chunk = d::attention_backward_chunk(l, limit);
    INFO("B " << l.B << ", S " << l.S << ", H " << l.H << ", group " << l.group << ": chunk " << chunk.batch
              << " rows x " << chunk.kv_heads << " key/value heads");
    CHECK(chunk == c.expected);
    CHECK(d::attention_workspace_bytes(l, chunk) <= limit);
    auto g = attention::graphs_of<strata::bf16>(l, 90, chunk);
    auto bwd = g.backward->validate();
    INFO(bwd.get_message());
    CHECK(bwd.is_good());
  }
  // The smallest chunks, as tests/cuda/nn_transformer.cu forces them.
  for (const auto& l : {separate(2, 100, 4, 2, 64), interleaved(2, 128, 3, 64)}) {
    const auto chunk = d::attention_backward_chunk(l, 1);
    CHECK(chunk == d::attention_chunk{1, 1});
    auto g = attention::graphs_of<strata::bf16>(l, 90, chunk);
    CHECK(g.backward->validate().is_good());
  }
}

TEST_CASE("cuDNN refuses a head size that is not a multiple of 8") {
  require_loaded();
  auto g = attention::graphs_of<strata::bf16>(separate(2, 64, 4, 4, 100), 90);
  CHECK_FALSE(g.forward->validate().is_good());
}

#else

TEST_CASE("cuDNN graphs: this build has no cuDNN headers") {
  std::printf("strata::cudnn is not built: skipped\n");
  std::exit(77);
}

#endif
