// strata-gpu: any
// Reflection under nvcc: layers with exactly one field (nn::embedding, nn::gelu,
// nn::position_embedding, a user's one-param layer) are counted and named as g++ names
// them, so any model trains from a .cu file; an aggregate with a reference field is
// counted by fields.hpp's own probe there too. Needs no GPU: it runs wherever it builds.
#include <strata/cuda.cuh>
#include <string>
#include <type_traits>
#include <vector>

#include "catch.hpp"

namespace {

struct scale {  // a user's layer whose only field is its param
  strata::param<float> gain;
};

struct model {
  strata::nn::embedding tokens;
  strata::nn::position_embedding positions;
  strata::nn::gelu act;
  scale s;
  std::vector<strata::nn::linear> heads;
};

struct tied {  // not a layer (concepts.hpp says so), but counted quickly to say it
  strata::nn::linear& fc;
  strata::param<float> bias;
};

}  // namespace

TEST_CASE("nvcc counts an aggregate with a reference field") {
  STATIC_REQUIRE(strata::detail::field_count_v<tied> == 2);
  STATIC_REQUIRE(std::is_same_v<strata::detail::field_t<0, tied>, strata::nn::linear>);
  STATIC_REQUIRE_FALSE(strata::layer<tied>);
}

TEST_CASE("nvcc counts and names one-field layers") {
  STATIC_REQUIRE(strata::detail::field_count_v<strata::nn::embedding> == 1);
  STATIC_REQUIRE(strata::detail::field_count_v<strata::nn::gelu> == 1);
  STATIC_REQUIRE(strata::detail::field_count_v<scale> == 1);
  STATIC_REQUIRE(strata::detail::field_count_v<model> == 5);
  model m;
  m.tokens = strata::nn::make_embedding(11, 4);
  m.positions.weight = strata::param<float>(strata::shape{8, 4});
  m.s.gain = strata::param<float>(strata::shape{4});
  m.heads.push_back(strata::nn::make_linear(4, 3));
  strata::assign_names(m);
  const auto layout = strata::flat_layout::of(m);
  std::vector<std::string> names;
  for (const auto& p : layout.params()) names.push_back(p.name);
  CHECK(names ==
        std::vector<std::string>{"tokens.weight", "positions.weight", "s.gain", "heads.0.weight", "heads.0.bias"});
}
