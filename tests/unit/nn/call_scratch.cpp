// Tensors of one call, lent by the trainer (space/call_scratch.hpp): a pool holds one S
// per type, scratch_of takes it where the context has a pool and the cache's own
// elsewhere, and layers sharing one S (Qwen2's decoder: its own, attention's and the
// MLP's) give the bits of layers that each keep their own, while their caches keep none.
#include <cstring>
#include <span>
#include <utility>

#include <strata/model/reflect.hpp>
#include <strata/models/qwen2.hpp>
#include <strata/space/call_scratch.hpp>

#include "support.hpp"

using namespace nn_test;
namespace nn = strata::nn;
namespace sm = strata::models;

namespace {

// The test context with a trainer's pool.
struct pooled_context : context {
  strata::scratch_pool* pool = nullptr;
  strata::scratch_pool* scratch() const noexcept { return pool; }
};

struct small {
  tensor<float> a;
};
struct other {
  tensor<float> a;
};

using layer_t = sm::qwen2_decoder_layer;
using cache_t = layer_t::cache<strata::host>;

// Two decoder layers of one type and different widths (MLP 24 and 40, 4 and 2 key/value
// heads), params from rng.
std::vector<layer_t> make_layers(param_store& store, std::mt19937& rng) {
  std::vector<layer_t> ls;
  for (auto [inter, kv] : {std::pair{24, 4}, std::pair{40, 2}})
    ls.push_back({nn::make_rms_norm(16), nn::make_grouped_query_attention(16, 4, kv, 10000.0f), nn::make_rms_norm(16),
                  nn::make_swiglu_mlp(16, inter)});
  for (auto& l : ls) strata::for_each_param(l, [&](auto& p, std::string_view) { store.bind(p, rng, -0.3f, 0.3f); });
  return ls;
}

struct run_result {
  tensor<float> y, dx;
  std::vector<float> grads;
};

// Forward through both layers, then backward from dy, as a trainer orders them.
template <class Ctx>
run_result run(std::vector<layer_t>& ls, Ctx& ctx, std::vector<cache_t>& caches, const tensor<float>& x,
               const tensor<float>& dy) {
  run_result r;
  tensor<float> mid, dmid;
  ls[0].forward(ctx, x, mid, caches[0]);
  ls[1].forward(ctx, mid, r.y, caches[1]);
  ls[1].backward(ctx, dy, dmid, caches[1]);
  ls[0].backward(ctx, dmid, r.dx, caches[0]);
  for (auto& l : ls)
    strata::for_each_param(l, [&](auto& p, std::string_view) {
      for (float& g : p.grads()) {
        r.grads.push_back(g);
        g = 0.0f;
      }
    });
  return r;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

TEST_CASE("scratch_pool lends one S per type; scratch_of takes the pool's, else the cache's own") {
  strata::scratch_pool pool;
  small& s = pool.get<small>();
  CHECK(&pool.get<small>() == &s);
  CHECK(static_cast<void*>(&pool.get<other>()) != static_cast<void*>(&s));

  strata::call_scratch<small> c1, c2;
  context plain;  // no scratch(): each cache its own
  CHECK(&strata::scratch_of(plain, c1) == &c1.own);
  CHECK(&strata::scratch_of(plain, c2) == &c2.own);
  pooled_context without;  // scratch() returns none: the cache's own too
  CHECK(&strata::scratch_of(without, c1) == &c1.own);
  pooled_context lent;
  lent.pool = &pool;
  CHECK(&strata::scratch_of(lent, c1) == &s);
  CHECK(&strata::scratch_of(lent, c2) == &s);
}

TEST_CASE("decoder layers lent one scratch: the bits of their own, and their caches keep no gradients") {
  std::mt19937 rng(7);
  param_store store;
  auto ls = make_layers(store, rng);
  const auto x = random_tensor(shape{2, 5, 16}, rng);
  const auto dy = random_tensor(shape{2, 5, 16}, rng);

  context plain;
  std::vector<cache_t> own(2);
  const run_result a = run(ls, plain, own, x, dy);

  strata::scratch_pool pool;
  pooled_context lent;
  lent.pool = &pool;
  std::vector<cache_t> shared(2);
  const run_result b = run(ls, lent, shared, x, dy);
  // And again on the same caches and pool (a second step): the same bits.
  const run_result c = run(ls, lent, shared, x, dy);

  for (const run_result* r : {&b, &c}) {
    CHECK(same_bits(r->y.span(), a.y.span()));
    CHECK(same_bits(r->dx.span(), a.dx.span()));
    CHECK(same_bits(r->grads, a.grads));
  }
  // Without a pool each cache held its gradients; lent, none of them did, and the pool's
  // MLP scratch is the wider layer's.
  CHECK(own[1].mlp.work.own.d_gate.numel() == 10 * 40);
  for (const auto& cache : shared) {
    CHECK(cache.work.own.dh.capacity() == 0);
    CHECK(cache.work.own.n1.capacity() == 0);
    CHECK(cache.mlp.work.own.h.capacity() == 0);
    CHECK(cache.mlp.work.own.d_gate.capacity() == 0);
    CHECK(cache.self_attn.work.own.dq.capacity() == 0);
  }
  CHECK(pool.get<nn::swiglu_mlp::scratch<strata::host, float>>().d_gate.capacity() == 10 * 40);
}
