// The bucket plan (docs/architecture.md, "Buckets are the unit of sharding"): buckets are
// whole layers grouped walking from the last layer until a bucket holds bucket_elems
// elements (a larger layer is a bucket of its own), each padded to a multiple of
// ranks x 16 and split into equal pieces; a rank's shard is its piece of every bucket,
// concatenated. Checked on hand-computed plans and, rule by rule, on random layouts.
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "catch.hpp"
#include "strata/model/layout.hpp"
#include "strata/model/param.hpp"
#include "strata/parallel/bucket_plan.hpp"
#include "strata/train/detail/sharded_state.hpp"

using strata::bucket_plan;
using strata::flat_layout;
using strata::param;

namespace {

// A layer of a 1 x w matrix (decays) and a bias of b (does not); w = b = 0 is a layer
// without params.
struct layer {
  param<float> weight;
  param<float> bias;
};
struct model {
  std::vector<layer> layers;
};

struct layer_size {
  std::int64_t w = 0, b = 0;
};

model make_model(const std::vector<layer_size>& sizes) {
  model m;
  for (const layer_size& s : sizes) m.layers.push_back({param<float>({1, s.w}), param<float>({s.b})});
  return m;
}

// Layers of exactly these many elements: weights only, multiples of the alignment.
flat_layout layout_of(const std::vector<std::int64_t>& weights) {
  std::vector<layer_size> sizes;
  for (std::int64_t w : weights) sizes.push_back({w, 0});
  model m = make_model(sizes);
  return flat_layout::of(m, 16);
}

std::size_t round_up(std::size_t x, std::size_t q) { return (x + q - 1) / q * q; }

// Every rule of the plan of layers [begin, end) of `layout`.
void check_plan(const flat_layout& layout, int ranks, std::size_t bucket_elems, std::size_t begin, std::size_t end) {
  INFO("ranks " << ranks << ", bucket_elems " << bucket_elems << ", layers [" << begin << ", " << end << ") of "
                << layout.segments().size());
  const bucket_plan plan(layout, ranks, bucket_elems, begin, end);
  const auto& segs = layout.segments();
  const auto& buckets = plan.buckets();
  const auto R = static_cast<std::size_t>(ranks);
  auto layer_size = [&](std::size_t l) { return segs[l].size; };
  REQUIRE(!buckets.empty());
  CHECK(plan.ranks() == ranks);

  // Whole layers, in forward order, covering [begin, end) without gaps.
  CHECK(buckets.front().first_layer == begin);
  CHECK(buckets.back().end_layer == end);
  bool any_elems = false;
  for (std::size_t l = begin; l < end; ++l) any_elems = any_elems || layer_size(l) > 0;
  std::size_t offset = 0, shard = 0, max_size = 0;
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    const strata::bucket& b = buckets[i];
    INFO("bucket " << i << ": layers [" << b.first_layer << ", " << b.end_layer << ")");
    REQUIRE(b.first_layer < b.end_layer);
    if (i > 0) CHECK(b.first_layer == buckets[i - 1].end_layer);
    CHECK(b.src_begin == segs[b.first_layer].offset);
    CHECK(b.src_end == segs[b.end_layer - 1].offset + layer_size(b.end_layer - 1));

    // Grown from its last layer: a layer joins while the bucket holds fewer than
    // bucket_elems, if the bucket is still empty or the layer fits...
    std::size_t held = 0;
    for (std::size_t l = b.end_layer; l-- > b.first_layer;) {
      CHECK(held < bucket_elems);
      CHECK((held == 0 || held + layer_size(l) <= bucket_elems));
      held += layer_size(l);
    }
    CHECK(held == b.src_end - b.src_begin);
    // ... and it stopped for a reason: full, or the layer before does not fit. Only the
    // first bucket can be empty: leading layers without params, left over when the
    // bucket after them filled up (a 0-element bucket: its collectives move nothing).
    if (b.first_layer > begin)
      CHECK((held >= bucket_elems || (held > 0 && held + layer_size(b.first_layer - 1) > bucket_elems)));
    if (any_elems && i > 0) CHECK(held > 0);

    // Padded to the smallest multiple of ranks x 16; equal pieces of whole cache lines.
    CHECK(b.size == round_up(held, R * bucket_plan::piece_alignment));
    CHECK(b.piece * R == b.size);
    CHECK(b.piece % bucket_plan::piece_alignment == 0);
    CHECK(b.offset == offset);
    CHECK(b.shard_offset == shard);
    for (int r = 0; r < ranks; ++r) CHECK(b.piece_begin(r) == b.offset + static_cast<std::size_t>(r) * b.piece);
    for (std::size_t l = b.first_layer; l < b.end_layer; ++l) CHECK(plan.bucket_of_layer(l) == i);
    offset += b.size;
    shard += b.piece;
    max_size = std::max(max_size, b.size);
  }
  CHECK(plan.total() == offset);
  CHECK(plan.shard_size() == shard);
  CHECK(plan.shard_size() * R == plan.total());
  CHECK(plan.max_bucket() == max_size);
  CHECK(plan.max_piece() == max_size / R);

  // Every element of the stage's params lands in one place of one rank's shard, and
  // the decay runs give it its param's flag.
  std::vector<std::vector<int>> flag(R, std::vector<int>(shard, -1));
  for (int r = 0; r < ranks; ++r) {
    const auto runs = plan.shard_runs(r);
    std::size_t at = 0;
    for (std::size_t k = 0; k < runs.size(); ++k) {
      CHECK(runs[k].offset == at);  // contiguous: padding joins a neighbouring run
      CHECK(runs[k].count > 0);
      if (k > 0) CHECK(runs[k].decay != runs[k - 1].decay);  // neighbours with one flag are merged
      for (std::size_t j = 0; j < runs[k].count && at + j < shard; ++j)
        flag[static_cast<std::size_t>(r)][at + j] = runs[k].decay;
      at += runs[k].count;
    }
    CHECK(at == shard);
  }
  std::vector<int> full_flag(offset, -1);
  {
    std::size_t at = 0;
    for (const auto& run : plan.master_runs(0, true)) {  // no ties here: replica = padded
      CHECK(run.offset == at);
      for (std::size_t j = 0; j < run.count && at + j < offset; ++j) full_flag[at + j] = run.decay;
      at += run.count;
    }
    CHECK(at == offset);
  }
  std::vector<std::vector<int>> hits(R, std::vector<int>(shard, 0));
  std::size_t placed = 0, expected = 0, wrong_flag = 0;
  for (const auto& p : layout.params()) {
    if (p.layer_index < begin || p.layer_index >= end || p.numel == 0) continue;
    expected += p.numel;
    const strata::bucket& b = buckets[plan.bucket_of_layer(p.layer_index)];
    const std::size_t base = plan.to_padded(p.offset);
    CHECK(base == b.offset + (p.offset - b.src_begin));
    for (std::size_t e = 0; e < p.numel; ++e) {
      const std::size_t in_bucket = base + e - b.offset;
      REQUIRE(in_bucket < b.size);
      const std::size_t r = in_bucket / b.piece, at = b.shard_offset + in_bucket % b.piece;
      ++hits[r][at];
      ++placed;
      wrong_flag += flag[r][at] != static_cast<int>(p.decay);
      wrong_flag += full_flag[base + e] != static_cast<int>(p.decay);
    }
  }
  CHECK(placed == expected);
  std::size_t doubly = 0;
  for (const auto& h : hits)
    for (int n : h) doubly += n > 1;
  CHECK(doubly == 0);
  CHECK(wrong_flag == 0);
}

}  // namespace

TEST_CASE("bucket plan: a hand-computed plan") {
  // Layers of 64, 128, 64, 256, 64 elements, buckets of 200, 3 ranks (quantum 48).
  // From the last: [4] (256 more would not fit), [3] (larger than a bucket: its own),
  // [1, 2] (192; 64 more would not fit), [0].
  const flat_layout layout = layout_of({64, 128, 64, 256, 64});
  const bucket_plan plan(layout, 3, 200);
  struct expected {
    std::size_t first, end, size, piece, offset, shard_offset;
  };
  const expected want[] = {
      {0, 1, 96, 32, 0, 0}, {1, 3, 192, 64, 96, 32}, {3, 4, 288, 96, 288, 96}, {4, 5, 96, 32, 576, 192}};
  REQUIRE(plan.buckets().size() == 4);
  for (std::size_t i = 0; i < 4; ++i) {
    INFO("bucket " << i);
    const auto& b = plan.buckets()[i];
    CHECK(b.first_layer == want[i].first);
    CHECK(b.end_layer == want[i].end);
    CHECK(b.size == want[i].size);
    CHECK(b.piece == want[i].piece);
    CHECK(b.offset == want[i].offset);
    CHECK(b.shard_offset == want[i].shard_offset);
  }
  CHECK(plan.total() == 672);
  CHECK(plan.shard_size() == 224);
  CHECK(plan.max_bucket() == 288);
  CHECK(plan.max_piece() == 96);
  CHECK(plan.bucket_of_layer(2) == 1);
  // Layer 2 starts 192 elements into the flat layout, 128 into its bucket.
  CHECK(plan.to_padded(192) == 96 + 128);
  // Rank 1's piece of bucket 2 starts 96 elements into it.
  CHECK(plan.buckets()[2].piece_begin(1) == 288 + 96);
  check_plan(layout, 3, 200, 0, 5);
}

TEST_CASE("bucket plan: a layer larger than a bucket is a bucket of its own") {
  const flat_layout layout = layout_of({32, 512, 32});
  const bucket_plan plan(layout, 2, 100);
  REQUIRE(plan.buckets().size() == 3);
  CHECK(plan.buckets()[1].first_layer == 1);
  CHECK(plan.buckets()[1].end_layer == 2);
  CHECK(plan.buckets()[1].size == 512);
  CHECK(plan.max_bucket() == 512);
  // Buckets take turns in two slots by parity: the big odd one and the largest even one
  // (32 padded to 2 x 16), not two of the big one.
  CHECK(plan.slot_elems() == 512 + 32);
  CHECK(plan.slot_offset(0) == 0);
  CHECK(plan.slot_offset(1) == 32);
  CHECK(plan.slot_offset(2) == 0);
  CHECK(plan.slot_piece_elems() == (512 + 32) / 2);
  CHECK(plan.slot_piece_offset(1) == 16);
  check_plan(layout, 2, 100, 0, 3);
}

TEST_CASE("bucket plan: layers without params join a bucket with params") {
  // From the last: the empty layer 3 and layer 2; the empty layer 1 and layer 0.
  const flat_layout layout = layout_of({64, 0, 64, 0});
  const bucket_plan plan(layout, 1, 64);
  REQUIRE(plan.buckets().size() == 2);
  CHECK(plan.buckets()[0].first_layer == 0);
  CHECK(plan.buckets()[0].end_layer == 2);
  CHECK(plan.buckets()[1].first_layer == 2);
  CHECK(plan.buckets()[1].end_layer == 4);
  CHECK(plan.buckets()[0].size == 64);
  CHECK(plan.buckets()[1].size == 64);
  check_plan(layout, 1, 64, 0, 4);
  check_plan(layout, 4, 1, 0, 4);

  // A model of layers without params: one empty bucket, an empty shard.
  const flat_layout none = layout_of({0, 0, 0});
  const bucket_plan empty(none, 2, 100);
  REQUIRE(empty.buckets().size() == 1);
  CHECK(empty.buckets()[0].size == 0);
  CHECK(empty.total() == 0);
  CHECK(empty.shard_size() == 0);
  CHECK(empty.shard_runs(1).empty());
}

TEST_CASE("bucket plan: one rank owns every bucket whole") {
  const flat_layout layout = layout_of({48, 16, 80});
  const bucket_plan plan(layout, 1, 64);
  for (const auto& b : plan.buckets()) {
    CHECK(b.piece == b.size);
    CHECK(b.size % 16 == 0);
  }
  CHECK(plan.shard_size() == plan.total());
  CHECK(plan.shard_runs(0) == plan.master_runs(0, true));
  check_plan(layout, 1, 64, 0, 3);
}

TEST_CASE("bucket plan: many ranks pad a small bucket to ranks x 16") {
  const flat_layout layout = layout_of({16, 48});
  const bucket_plan plan(layout, 64, 1000);
  REQUIRE(plan.buckets().size() == 1);
  CHECK(plan.buckets()[0].size == 1024);
  CHECK(plan.buckets()[0].piece == 16);
  CHECK(plan.shard_size() == 16);
  // Ranks 4 and up hold padding only: one run over their whole piece.
  const auto runs = plan.shard_runs(10);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].offset == 0);
  CHECK(runs[0].count == 16);
  check_plan(layout, 64, 1000, 0, 2);
}

TEST_CASE("bucket plan: a pipeline stage plans its own layers") {
  std::vector<layer_size> sizes{{40, 8}, {100, 0}, {0, 12}, {30, 30}, {64, 0}};
  model m = make_model(sizes);
  const flat_layout layout = flat_layout::of(m, 16);
  const bucket_plan plan(layout, 2, 64, 1, 4);
  CHECK(plan.buckets().front().first_layer == 1);
  CHECK(plan.buckets().back().end_layer == 4);
  // Only the stage's params: layers 1-3 padded, nothing of layers 0 and 4.
  std::size_t stage_elems = 0;
  for (std::size_t l = 1; l < 4; ++l) stage_elems += layout.segments()[l].size;
  std::size_t planned = 0;
  for (const auto& b : plan.buckets()) planned += b.src_end - b.src_begin;
  CHECK(planned == stage_elems);
  check_plan(layout, 2, 64, 1, 4);
  check_plan(layout, 3, 1, 0, 5);
  check_plan(layout, 5, 1 << 20, 4, 5);
}

TEST_CASE("bucket plan: bad arguments are config_errors") {
  const flat_layout layout = layout_of({16, 16, 16});
  CHECK_THROWS_AS(bucket_plan(layout, 0, 64), strata::config_error);
  CHECK_THROWS_WITH(bucket_plan(layout, 0, 64), strata_test::contains_text("0 ranks"));
  CHECK_THROWS_AS(bucket_plan(layout, 2, 0), strata::config_error);
  CHECK_THROWS_WITH(bucket_plan(layout, 2, 0), strata_test::contains_text("at least 1 element"));
  CHECK_THROWS_AS(bucket_plan(layout, 2, 64, 2, 2), strata::config_error);
  CHECK_THROWS_WITH(bucket_plan(layout, 2, 64, 2, 2), strata_test::contains_text("layers [2, 2) of 3"));
}

TEST_CASE("bucket plan: random layouts follow every rule") {
  std::mt19937 gen(20240611);
  std::uniform_int_distribution<int> layers(1, 12), coin(0, 3);
  std::uniform_int_distribution<std::int64_t> weights(1, 300), biases(1, 40);
  const int rank_counts[] = {1, 2, 3, 4, 8, 64};
  const std::size_t bucket_sizes[] = {1, 16, 50, 100, 1000, std::size_t{1} << 20};
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<layer_size> sizes(static_cast<std::size_t>(layers(gen)));
    for (auto& s : sizes) {
      s.w = coin(gen) == 0 ? 0 : weights(gen);  // a quarter of the layers have no matrix
      s.b = coin(gen) < 2 ? 0 : biases(gen);
    }
    model m = make_model(sizes);
    const flat_layout layout = flat_layout::of(m, 16 * (1 + trial % 4));
    const std::size_t L = sizes.size();
    std::uniform_int_distribution<std::size_t> first(0, L - 1);
    const std::size_t begin = trial % 3 == 0 ? first(gen) : 0;
    std::uniform_int_distribution<std::size_t> last(begin + 1, L);
    const std::size_t end = trial % 3 == 0 ? last(gen) : L;
    check_plan(layout, rank_counts[trial % 6], bucket_sizes[(trial / 6) % 6], begin, end);
  }
}

// A tied LM head (docs/architecture.md, "Tied params"): where the copy and its source are
// planned together, the copy's bucket takes the source's piece of the shard, so the one
// tensor has one master, one set of moments and one gradient shard; the copy adds no runs.
// A stage without the source plans the copy as its own.
TEST_CASE("bucket plan: a tied copy on the source's stage shares its piece of the shard") {
  model m = make_model({{64, 0}, {48, 16}, {32, 0}, {64, 0}});
  const flat_layout names = flat_layout::of(m, 16);
  m.layers[3].weight.tied_to = names.params()[0].name;  // the head is the embedding
  const flat_layout layout = flat_layout::of(m, 16);
  for (int ranks : {1, 2, 4}) {
    INFO("ranks " << ranks);
    const bucket_plan plan(layout, ranks, 1000);
    const auto& bs = plan.buckets();
    const std::size_t c = plan.bucket_of_layer(3), s = plan.bucket_of_layer(0);
    REQUIRE(c != s);
    CHECK(bs[c].shares_piece);
    CHECK_FALSE(bs[s].shares_piece);
    CHECK(bs[c].tied_partner == s);
    CHECK(bs[s].tied_partner == c);
    CHECK(bs[c].shard_offset == bs[s].shard_offset);
    CHECK(bs[c].piece == bs[s].piece);
    // The other buckets tile the shard without the copy's piece.
    std::size_t shard = 0;
    for (std::size_t b = 0; b < bs.size(); ++b) {
      if (b != c) CHECK(bs[b].tied_partner == (b == s ? c : strata::bucket::npos));
      if (bs[b].shares_piece) continue;
      CHECK(bs[b].shard_offset == shard);
      shard += bs[b].piece;
    }
    CHECK(plan.shard_size() == shard);
    CHECK(plan.shard_size() * static_cast<std::size_t>(ranks) == plan.total() - bs[c].size);
    // A replicated (ZeRO-0) master holds the copy's bucket once too, at the source's place.
    CHECK(bs[c].replica_offset == bs[s].replica_offset);
    std::size_t replica = 0;
    for (const auto& b : bs) {
      if (b.shares_piece) continue;
      CHECK(b.replica_offset == replica);
      replica += b.size;
    }
    CHECK(plan.replica_total() == replica);
    CHECK(plan.replica_total() == plan.total() - bs[c].size);
    for (int r = 0; r < ranks; ++r) {
      std::size_t at = 0;
      for (const auto& run : plan.shard_runs(r)) {
        CHECK(run.offset == at);
        at += run.count;
      }
      CHECK(at == plan.shard_size());
      // Each bucket's held range: the piece (ZeRO 1-3) or the whole bucket (ZeRO-0), the
      // copy's at its source's place in the master; a replicated master's runs tile it.
      for (const auto& b : bs) {
        const strata::held_range piece = b.held(r, false), whole = b.held(r, true);
        CHECK(piece.padded == b.piece_begin(r));
        CHECK(piece.count == b.piece);
        CHECK(piece.master == b.shard_offset);
        CHECK(whole.padded == b.offset);
        CHECK(whole.count == b.size);
        CHECK(whole.master == b.replica_offset);
      }
      CHECK(bs[c].held(r, true).master == bs[s].held(r, true).master);
      at = 0;
      for (const auto& run : plan.master_runs(r, true)) {
        CHECK(run.offset == at);
        at += run.count;
      }
      CHECK(at == plan.replica_total());
    }
    // The head's stage alone, or the embedding's: nothing is shared.
    for (const auto& [first, end] : {std::pair<std::size_t, std::size_t>{1, 4}, {0, 3}}) {
      const bucket_plan stage(layout, ranks, 1000, first, end);
      for (const auto& b : stage.buckets()) {
        CHECK_FALSE(b.shares_piece);
        CHECK(b.tied_partner == strata::bucket::npos);
      }
      CHECK(stage.shard_size() * static_cast<std::size_t>(ranks) == stage.total());
      CHECK(stage.replica_total() == stage.total());
      for (const auto& b : stage.buckets()) CHECK(b.replica_offset == b.offset);
    }
  }
}

// What the optimizer steps, from what each rank's master holds (bucket::held): runs of
// master elements with their decay flag and where their compute params go, and the tied
// copy's mirror run, by hand for a plan of an embedding (64), its tied head (64) and a
// layer of a 32-element weight and a 16-element bias, over 2 ranks. Buckets: [0, 64),
// the head's [64, 128) sharing the first's piece, [128, 192) (the bias at 160, padding
// from 176); replica offsets 0, 0, 64; shard offsets 0, 0, 32.
TEST_CASE("bucket plan: the optimizer's runs and the tied copy's mirror at ZeRO 0, 1 and 3, by hand") {
  model m = make_model({{64, 0}, {64, 0}, {32, 16}});
  m.layers[1].weight.tied_to = flat_layout::of(m, 16).params()[0].name;
  const flat_layout layout = flat_layout::of(m, 16);
  const bucket_plan plan(layout, 2, 1000);
  REQUIRE(plan.buckets().size() == 3);
  REQUIRE(plan.buckets()[1].shares_piece);
  struct run {
    std::size_t begin, end, out;
    bool decay;
    bool operator==(const run&) const = default;
  };
  const auto runs_of = [&](int stage, int rank) {
    strata::detail::sharded_state<float> st;
    st.allocate(plan, stage, 2, false, rank);
    std::vector<run> runs, mirrors;
    for (const auto& r : st.runs) runs.push_back({r.begin, r.end, r.out_begin, r.decay});
    for (const auto& r : st.mirrors) mirrors.push_back({r.begin, r.end, r.out_begin, r.decay});
    return std::pair{runs, mirrors};
  };
  using runs_t = std::vector<run>;
  // ZeRO-0: the master holds the embedding at 0 and the last bucket at 64 (the head's
  // bucket once, at the embedding's place); the head's params are the mirror's.
  for (int rank : {0, 1}) {
    INFO("ZeRO-0, rank " << rank);
    const auto [runs, mirrors] = runs_of(0, rank);
    CHECK(runs == runs_t{{0, 64, 0, true}, {64, 96, 128, true}, {96, 128, 160, false}});
    CHECK(mirrors == runs_t{{0, 64, 64, true}});
  }
  // ZeRO-1 and 2: each rank's half of the embedding's piece and of the last bucket.
  for (int stage : {1, 2}) {
    INFO("ZeRO-" << stage);
    const auto [runs0, mirrors0] = runs_of(stage, 0);
    CHECK(runs0 == runs_t{{0, 32, 0, true}, {32, 64, 128, true}});
    CHECK(mirrors0 == runs_t{{0, 32, 64, true}});
    const auto [runs1, mirrors1] = runs_of(stage, 1);
    CHECK(runs1 == runs_t{{0, 32, 32, true}, {32, 64, 160, false}});
    CHECK(mirrors1 == runs_t{{0, 32, 96, true}});
  }
  // ZeRO-3: params are the shard itself; the head's gather reads the embedding's piece.
  const auto [runs3, mirrors3] = runs_of(3, 1);
  CHECK(runs3 == runs_t{{0, 32, 0, true}, {32, 64, 32, false}});
  CHECK(mirrors3.empty());
}
