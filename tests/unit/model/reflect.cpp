// Reflection of user models: field names on this Boost, the concepts, the dotted param
// names of a nested model with a vector of blocks, and the order of layers.
#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <strata/model/concepts.hpp>
#include <strata/model/detail/fields.hpp>
#include <strata/model/field_names.hpp>
#include <strata/model/reflect.hpp>

#include "catch.hpp"
#include "test_models.hpp"

namespace st = strata_test;
using strata::param;

namespace {

// Types the concepts must reject (checked quietly here; compile_fail/ checks the messages).
struct with_constructor {
  with_constructor() {}
  st::linear fc;
};
class with_private_field {
  param<float> w;

 public:
  const param<float>& weight() const { return w; }
};
struct with_base : st::linear {
  param<float> extra;
};
struct with_reference {
  st::linear& fc;
};
struct with_virtual {
  virtual ~with_virtual() = default;
  st::linear fc;
};
struct model_with_bare_param {
  st::embedding embed;
  param<float> scale;
};
struct model_with_value {
  st::embedding embed;
  int n_layers;
};
struct model_with_bad_layer {
  st::embedding embed;
  with_private_field opaque;
};
struct layer_with_bad_member {
  st::linear fc;
  with_private_field inner;
};

// Aggregates that cannot be value-initialized, which fields.hpp counts itself: a
// reference first or last, a layer holding one, and a move-only field beside such a layer.
struct reference_first {
  st::linear& fc;
  param<float> bias;
  int n;
};
struct reference_last {
  param<float> a;
  param<float> b;
  const param<float>& c;
};
struct holds_reference_layer {
  st::embedding embed;
  reference_first head;
  st::linear out;
};
struct move_only_and_reference {
  std::unique_ptr<int> owned;
  reference_first head;
};

// A layer holding a range of sub-layers, a tensor, a string and a vector of floats.
struct moe {
  st::linear router;
  std::vector<st::linear> experts;
  strata::tensor<float> scratch;
  std::vector<float> capacities;
  std::string label;
};

struct with_tensor_model {
  moe mixture;
};

// Names given by the type override the ones the compiler spells.
struct renamed_layer {
  param<float> w;
  static constexpr std::array<std::string_view, 1> field_names{"kernel"};
};
struct model_with_renamed {
  renamed_layer dense;
};

}  // namespace

TEST_CASE("field names come from the declarations, usable at compile time", "[model][field_names]") {
  static_assert(strata::field_names<st::block>()[0] == "attn");
  static_assert(strata::field_names<st::norm>()[3] == "kind");
  constexpr auto& names = strata::field_names<st::model>();
  STATIC_REQUIRE(names.size() == 3);
  CHECK(names[0] == "embed");
  CHECK(names[1] == "blocks");
  CHECK(names[2] == "head");
  CHECK(strata::field_names<st::relu>().size() == 0);
  CHECK(strata::field_names<moe>() ==
        std::array<std::string_view, 5>{"router", "experts", "scratch", "capacities", "label"});
}

TEST_CASE("field names of a type local to a function", "[model][field_names]") {
  struct local_model {
    st::linear first;
    std::vector<st::block> stack;
  };
  CHECK(strata::field_names<local_model>() == std::array<std::string_view, 2>{"first", "stack"});
}

TEST_CASE("field names declared on the type are used", "[model][field_names]") {
  // A local type cannot have static data members: it declares its names with a
  // static function.
  struct local_layer {
    param<float> w;
    param<float> b;
    static constexpr std::array<std::string_view, 2> field_names() { return {"kernel", "offset"}; }
  };
  CHECK(strata::field_names<local_layer>() == std::array<std::string_view, 2>{"kernel", "offset"});
  local_layer l{param<float>({2, 2}), param<float>({2})};
  std::vector<std::string> seen;
  strata::for_each_param(l, [&](auto& p, std::string_view name) {
    seen.emplace_back(name);
    CHECK(&p == (seen.size() == 1 ? &l.w : &l.b));
  });
  CHECK(seen == std::vector<std::string>{"kernel", "offset"});

  model_with_renamed m{{param<float>({3})}};
  strata::assign_names(m);
  CHECK(m.dense.w.name == "dense.kernel");
}

TEST_CASE("the concepts accept layers and models and reject what PFR cannot reflect", "[model][concepts]") {
  STATIC_REQUIRE(strata::layer<st::linear>);
  STATIC_REQUIRE(strata::layer<st::block>);
  STATIC_REQUIRE(strata::layer<st::relu>);
  STATIC_REQUIRE(strata::layer<moe>);
  STATIC_REQUIRE(strata::model<st::model>);
  STATIC_REQUIRE(strata::model<const st::model>);
  STATIC_REQUIRE(strata::model<st::mlp_with_activations>);
  STATIC_REQUIRE(strata::model<with_tensor_model>);

  STATIC_REQUIRE_FALSE(strata::layer<with_constructor>);
  STATIC_REQUIRE_FALSE(strata::layer<with_private_field>);
  STATIC_REQUIRE_FALSE(strata::layer<with_base>);
  STATIC_REQUIRE_FALSE(strata::layer<with_reference>);
  STATIC_REQUIRE_FALSE(strata::layer<with_virtual>);
  STATIC_REQUIRE_FALSE(strata::layer<layer_with_bad_member>);
  STATIC_REQUIRE_FALSE(strata::layer<int>);
  STATIC_REQUIRE_FALSE(strata::layer<param<float>>);

  STATIC_REQUIRE_FALSE(strata::model<with_constructor>);
  STATIC_REQUIRE_FALSE(strata::model<model_with_bare_param>);
  STATIC_REQUIRE_FALSE(strata::model<model_with_value>);
  STATIC_REQUIRE_FALSE(strata::model<model_with_bad_layer>);
  STATIC_REQUIRE_FALSE(strata::model<std::vector<st::block>>);
}

TEST_CASE("aggregates with a reference field are counted and read field by field", "[model][concepts]") {
  using strata::detail::field_count_v;
  using strata::detail::field_t;
  STATIC_REQUIRE(field_count_v<reference_first> == 3);
  STATIC_REQUIRE(field_count_v<reference_last> == 3);
  STATIC_REQUIRE(field_count_v<holds_reference_layer> == 3);
  STATIC_REQUIRE(field_count_v<move_only_and_reference> == 2);
  STATIC_REQUIRE(std::is_same_v<field_t<0, reference_first>, st::linear>);
  STATIC_REQUIRE(std::is_same_v<field_t<2, reference_first>, int>);
  STATIC_REQUIRE(std::is_same_v<field_t<2, reference_last>, const param<float>>);
  STATIC_REQUIRE(std::is_same_v<field_t<1, holds_reference_layer>, reference_first>);
  STATIC_REQUIRE(std::is_same_v<field_t<1, move_only_and_reference>, reference_first>);

  st::linear shared;
  reference_first r{shared, {}, 7};
  CHECK(&strata::detail::field<0>(r) == &shared);
  CHECK(&strata::detail::field<1>(r) == &r.bias);
  CHECK(strata::detail::field<2>(std::as_const(r)) == 7);

  // Still not layers or models: the reference is what concepts.hpp reports.
  STATIC_REQUIRE_FALSE(strata::layer<reference_first>);
  STATIC_REQUIRE_FALSE(strata::layer<reference_last>);
  STATIC_REQUIRE_FALSE(strata::model<holds_reference_layer>);
}

TEST_CASE("for_each_param visits a nested model in declaration order with dotted names", "[model][reflect]") {
  st::model m = st::make_model(3);
  std::vector<std::string> names;
  std::vector<const param<float>*> seen;
  strata::for_each_param(m, [&](param<float>& p, std::string_view name) {
    names.emplace_back(name);
    seen.push_back(&p);
  });

  std::vector<std::string> expected{"embed.weight"};
  for (int b = 0; b < 3; ++b) {
    const std::string pre = "blocks." + std::to_string(b) + ".";
    for (const char* rest : {"attn.q.weight", "attn.q.bias", "attn.k.weight", "attn.k.bias", "attn.v.weight",
                             "attn.v.bias", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "ln.gamma", "ln.beta"})
      expected.push_back(pre + rest);
  }
  expected.push_back("head.weight");
  expected.push_back("head.bias");
  CHECK(names == expected);

  // The visited params are the model's own, not copies.
  REQUIRE(seen.size() == expected.size());
  CHECK(seen[0] == &m.embed.weight);
  CHECK(seen[1 + 12 * 2 + 6] == &m.blocks[2].fc1.weight);
  CHECK(seen[1 + 12 + 11] == &m.blocks[1].ln.beta);
  CHECK(seen.back() == &m.head.bias);
}

TEST_CASE("for_each_param walks ranges inside a layer and skips non-param fields", "[model][reflect]") {
  moe layer{st::make_linear(3, 4), {st::make_linear(4, 4), st::make_linear(4, 4)}, {}, {1.0f, 2.0f}, "moe"};
  std::vector<std::string> names;
  strata::for_each_param(layer, [&](auto& p, std::string_view name) {
    static_assert(std::is_same_v<decltype(p), param<float>&>);
    names.emplace_back(name);
  });
  CHECK(names == std::vector<std::string>{"router.weight", "router.bias", "experts.0.weight", "experts.0.bias",
                                          "experts.1.weight", "experts.1.bias"});
}

TEST_CASE("for_each_param takes a std::array or std::vector of layers at the root", "[model][reflect]") {
  // (A std::array of layers as a *field* makes g++ 12 crash inside Boost.PFR 1.81's
  // field count; at the root no field count is needed.)
  std::array<st::linear, 2> pair{st::make_linear(2, 3), st::make_linear(3, 2)};
  std::vector<std::string> names;
  strata::for_each_param(pair, [&](auto&, std::string_view name) { names.emplace_back(name); });
  CHECK(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
}

TEST_CASE("for_each_param on a const model gives const params", "[model][reflect]") {
  const st::model m = st::make_model(1);
  std::size_t count = 0, elems = 0;
  strata::for_each_param(m, [&](auto& p, std::string_view) {
    static_assert(std::is_same_v<decltype(p), const param<float>&>);
    ++count;
    elems += p.numel();
  });
  CHECK(count == 1 + 12 + 2);
  // 66 (embed) + block: 3 * (36 + 6) + (60 + 10) + (60 + 6) + 6 + 6 + head: 66 + 11.
  CHECK(elems == 66 + (3 * 42 + 70 + 66 + 12) + 77);
}

TEST_CASE("for_each_layer gives the model's layers in order, one per vector element", "[model][reflect]") {
  st::model m = st::make_model(3);
  std::vector<std::string> names;
  std::vector<std::size_t> indices;
  std::vector<const void*> layers;
  strata::for_each_layer(m, [&](auto& layer, std::string_view name, std::size_t index) {
    names.emplace_back(name);
    indices.push_back(index);
    layers.push_back(&layer);
  });
  CHECK(names == std::vector<std::string>{"embed", "blocks.0", "blocks.1", "blocks.2", "head"});
  CHECK(indices == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(layers == std::vector<const void*>{&m.embed, &m.blocks[0], &m.blocks[1], &m.blocks[2], &m.head});
}

TEST_CASE("zero-param layers are layers too", "[model][reflect]") {
  st::mlp_with_activations m{
      st::make_linear(4, 3), {}, st::make_linear(4, 4), std::vector<st::relu>(2), st::make_linear(1, 4)};
  std::vector<std::string> layer_names;
  strata::for_each_layer(m, [&](auto&, std::string_view name, std::size_t) { layer_names.emplace_back(name); });
  CHECK(layer_names == std::vector<std::string>{"fc1", "act", "fc2", "more_acts.0", "more_acts.1", "out"});
  std::vector<std::string> param_names;
  strata::for_each_param(m, [&](auto&, std::string_view name) { param_names.emplace_back(name); });
  CHECK(param_names ==
        std::vector<std::string>{"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias", "out.weight", "out.bias"});
}

TEST_CASE("assign_names fills every param's name with its dotted path", "[model][reflect]") {
  st::model m = st::make_model(2);
  strata::assign_names(m);
  CHECK(m.embed.weight.name == "embed.weight");
  CHECK(m.blocks[0].attn.k.bias.name == "blocks.0.attn.k.bias");
  CHECK(m.blocks[1].ln.gamma.name == "blocks.1.ln.gamma");
  CHECK(m.head.weight.name == "head.weight");
  strata::for_each_param(m, [](auto& p, std::string_view name) { CHECK(p.name == name); });

  // On a lone layer, names are relative to it.
  st::block b = st::make_block();
  strata::assign_names(b);
  CHECK(b.attn.v.weight.name == "attn.v.weight");
  CHECK(b.fc2.bias.name == "fc2.bias");
}
