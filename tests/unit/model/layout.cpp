// The flat layout of a nested model: exact offsets of every param, one aligned segment
// per layer, shards that cover every element exactly once, and binding params to it.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include <strata/core/buffer.hpp>
#include <strata/model/layout.hpp>
#include <strata/space/host.hpp>

#include "catch.hpp"
#include "test_models.hpp"

namespace st = strata_test;
using strata::flat_layout;

namespace {

struct expected_param {
  std::string name;
  strata::shape shape;
  std::size_t layer, offset;
};

// Offsets by hand, alignment 64, each param starting on a multiple of 16 in its layer:
//   embed    [11,6]=66                                  -> used 66,  segment [0, 128)
//   block    q.w 0 (36) q.b 48 (6) k.w 64 k.b 112 v.w 128 v.b 176 fc1.w 192 (60)
//            fc1.b 256 (10) fc2.w 272 (60) fc2.b 336 (6) ln.gamma 352 ln.beta 368 (6)
//                                                       -> used 374, segment size 384
//   blocks.0 at 128, blocks.1 at 512, blocks.2 at 896
//   head     w 0 (66) b 80 (11)                         -> used 91,  segment [1280, 1408)
std::vector<expected_param> expected_params() {
  std::vector<expected_param> e{{"embed.weight", {11, 6}, 0, 0}};
  const std::vector<expected_param> block{
      {"attn.q.weight", {6, 6}, 0, 0}, {"attn.q.bias", {6}, 0, 48},       {"attn.k.weight", {6, 6}, 0, 64},
      {"attn.k.bias", {6}, 0, 112},    {"attn.v.weight", {6, 6}, 0, 128}, {"attn.v.bias", {6}, 0, 176},
      {"fc1.weight", {10, 6}, 0, 192}, {"fc1.bias", {10}, 0, 256},        {"fc2.weight", {6, 10}, 0, 272},
      {"fc2.bias", {6}, 0, 336},       {"ln.gamma", {6}, 0, 352},         {"ln.beta", {6}, 0, 368}};
  const std::size_t block_offsets[] = {128, 512, 896};
  for (std::size_t b = 0; b < 3; ++b)
    for (const auto& p : block)
      e.push_back({"blocks." + std::to_string(b) + "." + p.name, p.shape, 1 + b, block_offsets[b] + p.offset});
  e.push_back({"head.weight", {11, 6}, 4, 1280});
  e.push_back({"head.bias", {11}, 4, 1280 + 80});
  return e;
}

}  // namespace

TEST_CASE("flat layout of a nested model: names, shapes and offsets", "[model][layout]") {
  st::model m = st::make_model(3);
  const flat_layout layout = flat_layout::of(m);

  const auto expected = expected_params();
  REQUIRE(layout.params().size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const auto& p = layout.params()[i];
    INFO("param " << i << ": " << p.name);
    CHECK(p.name == expected[i].name);
    CHECK(p.shape == expected[i].shape);
    CHECK(p.numel == expected[i].shape.numel());
    CHECK(p.layer_index == expected[i].layer);
    CHECK(p.offset == expected[i].offset);
    CHECK(p.decay == (expected[i].shape.rank >= 2));
  }

  struct expected_segment {
    const char* name;
    std::size_t offset, size, used;
  };
  const std::vector<expected_segment> segs{{"embed", 0, 128, 66},
                                           {"blocks.0", 128, 384, 374},
                                           {"blocks.1", 512, 384, 374},
                                           {"blocks.2", 896, 384, 374},
                                           {"head", 1280, 128, 91}};
  REQUIRE(layout.segments().size() == segs.size());
  for (std::size_t i = 0; i < segs.size(); ++i) {
    const auto& s = layout.segments()[i];
    INFO("segment " << i);
    CHECK(s.layer_index == i);
    CHECK(s.layer_name == segs[i].name);
    CHECK(s.offset == segs[i].offset);
    CHECK(s.size == segs[i].size);
    CHECK(s.used == segs[i].used);
  }
  CHECK(layout.total() == 1408);
  CHECK(layout.alignment() == 64);

  // of() also names the model's params.
  CHECK(m.blocks[2].fc2.bias.name == "blocks.2.fc2.bias");
  CHECK(layout.find("blocks.1.attn.v.bias").offset == 512 + 176);
  CHECK(&layout.find("head.weight") == &layout.params()[37]);
}

TEST_CASE("layout invariants hold for other alignments", "[model][layout]") {
  for (std::size_t alignment : {16u, 32u, 64u, 256u}) {
    st::model m = st::make_model(4);
    const flat_layout layout = flat_layout::of(m, alignment);
    INFO("alignment " << alignment);
    std::size_t end = 0;
    for (const auto& s : layout.segments()) {
      CHECK(s.offset == end);  // segments are contiguous, in layer order
      CHECK(s.offset % alignment == 0);
      CHECK(s.size % alignment == 0);
      CHECK(s.used <= s.size);
      CHECK(s.size - s.used < alignment);
      end = s.offset + s.size;
    }
    CHECK(layout.total() == end);
    std::size_t previous_end = 0;
    for (const auto& p : layout.params()) {
      const auto& s = layout.segments()[p.layer_index];
      CHECK(p.offset % flat_layout::param_alignment == 0);
      CHECK(p.offset >= std::max(previous_end, s.offset));  // in order, no overlap
      CHECK(p.offset + p.numel <= s.offset + s.used);
      CHECK(p.offset - previous_end <
            flat_layout::param_alignment + (s.offset > previous_end ? s.offset - previous_end : 0));
      previous_end = p.offset + p.numel;
    }
  }
}

TEST_CASE("shards cover every element exactly once for 1 to 9 ranks", "[model][layout][shard]") {
  st::model m = st::make_model(3);
  const flat_layout layout = flat_layout::of(m);
  for (int n = 1; n <= 9; ++n) {
    INFO(n << " ranks");
    const std::size_t padded = layout.padded_total(n);
    CHECK(padded >= layout.total());
    CHECK(padded % (static_cast<std::size_t>(n) * layout.alignment()) == 0);
    CHECK(padded - layout.total() < static_cast<std::size_t>(n) * layout.alignment());
    CHECK(layout.shard_size(n) * static_cast<std::size_t>(n) == padded);

    std::vector<int> covered(padded, 0);
    for (int r = 0; r < n; ++r) {
      const auto s = layout.shard(n, r);
      CHECK(s.size() == layout.shard_size(n));
      CHECK(s.begin % layout.alignment() == 0);
      for (std::size_t i = s.begin; i < s.end; ++i) ++covered[i];
    }
    CHECK(std::all_of(covered.begin(), covered.end(), [](int c) { return c == 1; }));

    // Each param element lies in exactly one shard's intersection with the param.
    std::vector<int> param_cover(padded, 0);
    for (const auto& p : layout.params())
      for (int r = 0; r < n; ++r) {
        const auto part = flat_layout::intersect(flat_layout::of_param(p), layout.shard(n, r));
        for (std::size_t i = part.begin; i < part.end; ++i) ++param_cover[i];
      }
    std::size_t covered_param_elems = 0;
    for (const auto& p : layout.params())
      for (std::size_t i = p.offset; i < p.offset + p.numel; ++i) covered_param_elems += (param_cover[i] == 1);
    std::size_t param_elems = 0;
    for (const auto& p : layout.params()) param_elems += p.numel;
    CHECK(covered_param_elems == param_elems);
    CHECK(static_cast<std::size_t>(std::count(param_cover.begin(), param_cover.end(), 1)) == param_elems);
  }
}

TEST_CASE("intersect gives the overlap, or an empty range", "[model][layout][shard]") {
  using r = flat_layout::range;
  CHECK(flat_layout::intersect(r{10, 20}, r{15, 30}) == r{15, 20});
  CHECK(flat_layout::intersect(r{10, 20}, r{0, 100}) == r{10, 20});
  CHECK(flat_layout::intersect(r{10, 20}, r{20, 30}).empty());
  CHECK(flat_layout::intersect(r{30, 40}, r{0, 10}).empty());
  CHECK(flat_layout::intersect(r{5, 5}, r{0, 10}).empty());
}

TEST_CASE("bind points each param at its offset; padding stays zero", "[model][layout][bind]") {
  st::model m = st::make_model(3);
  const flat_layout layout = flat_layout::of(m);
  strata::host_buffer<float> data(layout.total()), grad(layout.total());
  layout.bind(m, data.data(), grad.data());

  std::size_t i = 0;
  strata::for_each_param(m, [&](strata::param<float>& p, std::string_view name) {
    const auto& slot = layout.params()[i++];
    CHECK(slot.name == name);
    CHECK(p.data() == data.data() + slot.offset);
    CHECK(p.grad() == grad.data() + slot.offset);
    for (float& v : p.values()) v += 1.0f;
    for (float& g : p.grads()) g += 2.0f;
  });
  // Writing through every param touches each param element once and nothing else.
  std::vector<float> expected(layout.total(), 0.0f);
  for (const auto& p : layout.params())
    std::fill_n(expected.begin() + static_cast<std::ptrdiff_t>(p.offset), p.numel, 1.0f);
  CHECK(std::equal(expected.begin(), expected.end(), data.data()));
  for (float& v : expected) v *= 2.0f;
  CHECK(std::equal(expected.begin(), expected.end(), grad.data()));

  // Without gradients (inference), grads are unbound.
  layout.bind(m, data.data(), static_cast<float*>(nullptr));
  CHECK(m.head.bias.data() == data.data() + 1280 + 80);
  CHECK(m.head.bias.grad() == nullptr);
}

TEST_CASE("zero-param layers get empty segments", "[model][layout]") {
  st::mlp_with_activations m{
      st::make_linear(4, 3), {}, st::make_linear(4, 4), std::vector<st::relu>(2), st::make_linear(1, 4)};
  const flat_layout layout = flat_layout::of(m, 16);
  REQUIRE(layout.segments().size() == 6);
  // fc1: w 12 at 0, b 4 at 16 -> used 20, size 32; act: empty at 32; fc2: w 16 at 32,
  // b 4 at 48 -> used 20, size 32; more_acts.0/1: empty at 64; out: w 4 at 64, b 1 at 80.
  const std::vector<std::size_t> offsets{0, 32, 32, 64, 64, 64}, sizes{32, 0, 32, 0, 0, 32};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK(layout.segments()[i].offset == offsets[i]);
    CHECK(layout.segments()[i].size == sizes[i]);
  }
  CHECK(layout.segments()[1].layer_name == "act");
  CHECK(layout.segments()[4].layer_name == "more_acts.1");
  CHECK(layout.find("out.bias").offset == 80);
  CHECK(layout.find("out.bias").layer_index == 5);
  CHECK(layout.total() == 96);
}

TEST_CASE("an empty param takes no room", "[model][layout]") {
  struct no_bias_model {
    st::linear a, b;
  };
  no_bias_model m{{strata::param<float>({2, 3}), strata::param<float>({0})}, st::make_linear(2, 2)};
  const flat_layout layout = flat_layout::of(m, 16);
  CHECK(layout.find("a.bias").numel == 0);
  CHECK(layout.segments()[0].used == 6);
  CHECK(layout.segments()[0].size == 16);
  CHECK(layout.find("b.weight").offset == 16);
}

TEST_CASE("bad layout requests are config errors that say what", "[model][layout][errors]") {
  st::model m = st::make_model(2);
  CHECK_THROWS_AS(flat_layout::of(m, 0), strata::config_error);
  CHECK_THROWS_WITH(flat_layout::of(m, 40),
                    strata_test::contains_text("alignment of 40") && strata_test::contains_text("multiple of 16"));
  const flat_layout layout = flat_layout::of(m);
  CHECK_THROWS_WITH(layout.find("blocks.7.fc1.weight"),
                    strata_test::contains_text("no param named 'blocks.7.fc1.weight'"));
  CHECK_THROWS_AS(layout.find("embed"), strata::config_error);
  CHECK_THROWS_WITH(layout.padded_total(0), strata_test::contains_text("0 ranks"));
  CHECK_THROWS_WITH(layout.shard(4, 4), strata_test::contains_text("rank 4 among 4"));
  CHECK_THROWS_AS(layout.shard(4, -1), strata::config_error);

  // A model of another architecture does not bind; the message names the first param
  // that differs.
  strata::host_buffer<float> data(4096);
  st::model deeper = st::make_model(3);
  CHECK_THROWS_WITH(
      layout.bind(deeper, data.data(), static_cast<float*>(nullptr)),
      strata_test::contains_text("'blocks.2.attn.q.weight' [6, 6] but the layout has 'head.weight' [11, 6]"));
  st::model wider = st::make_model(2);
  wider.blocks[1].fc1 = st::make_linear(12, 6);
  CHECK_THROWS_WITH(
      layout.bind(wider, data.data(), static_cast<float*>(nullptr)),
      strata_test::contains_text("'blocks.1.fc1.weight' [12, 6] but the layout has 'blocks.1.fc1.weight' [10, 6]"));

  // Params missing or added at the end.
  struct stack {
    std::vector<st::linear> layers;
  };
  stack two{{st::make_linear(2, 2), st::make_linear(2, 2)}};
  const flat_layout stack_layout = flat_layout::of(two);
  stack three{{st::make_linear(2, 2), st::make_linear(2, 2), st::make_linear(2, 2)}};
  CHECK_THROWS_WITH(stack_layout.bind(three, data.data(), static_cast<float*>(nullptr)),
                    strata_test::contains_text("more params than the layout's 4; 'layers.2.weight' has no slot"));
  stack one{{st::make_linear(2, 2)}};
  CHECK_THROWS_WITH(stack_layout.bind(one, data.data(), static_cast<float*>(nullptr)),
                    strata_test::contains_text("the model has 2 params but the layout has 4"));
  CHECK_THROWS_WITH(stack_layout.bind(two, static_cast<float*>(nullptr), data.data()),
                    strata_test::contains_text("data buffer is null"));
}
