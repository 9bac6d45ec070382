// Tensors of one call, lent by the trainer (space/call_scratch.hpp): a pool holds one S
// per type, scratch_of takes it where the context has a pool and the cache's own
// elsewhere, and layers sharing one S (Qwen2's decoder: its own, attention's and the
// MLP's) give the bits of layers that each keep their own, while their caches keep none.
// examples/gpt's block, which makes its norms' and GELU's outputs again in backward,
// gives the bits of the same layers composed with every intermediate kept.
#include <cstring>
#include <span>
#include <utility>

#include <strata/model/reflect.hpp>
#include <strata/models/qwen2.hpp>
#include <strata/space/call_scratch.hpp>

#include "../../../examples/gpt/model.hpp"
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

// The layers' gradients in param order, zeroed after.
template <class Layer>
std::vector<float> take_grads(std::vector<Layer>& ls) {
  std::vector<float> out;
  for (auto& l : ls)
    strata::for_each_param(l, [&](auto& p, std::string_view) {
      for (float& g : p.grads()) {
        out.push_back(g);
        g = 0.0f;
      }
    });
  return out;
}

// Forward through both layers, then backward from dy, as a trainer orders them.
template <class Layer, class Ctx, class Cache>
run_result run(std::vector<Layer>& ls, Ctx& ctx, std::vector<Cache>& caches, const tensor<float>& x,
               const tensor<float>& dy) {
  run_result r;
  tensor<float> mid, dmid;
  ls[0].forward(ctx, x, mid, caches[0]);
  ls[1].forward(ctx, mid, r.y, caches[1]);
  ls[1].backward(ctx, dy, dmid, caches[1]);
  ls[0].backward(ctx, dmid, r.dx, caches[0]);
  r.grads = take_grads(ls);
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
  CHECK(own[1].mlp.work.own.dh.numel() == 10 * 40);
  for (const auto& cache : shared) {
    CHECK(cache.work.own.dh.capacity() == 0);
    CHECK(cache.work.own.n1.capacity() == 0);
    CHECK(cache.mlp.work.own.h.capacity() == 0);
    CHECK(cache.mlp.work.own.dh.capacity() == 0);
    CHECK(cache.self_attn.work.own.dq.capacity() == 0);
  }
  CHECK(pool.get<nn::swiglu_mlp::scratch<strata::host, float>>().dh.capacity() == 10 * 40);
}

namespace {

// examples/gpt's block spelled out, every intermediate kept: what the block computed
// before it made h1, h2 and g again in backward.
struct kept_block {
  explicit kept_block(gpt::block& blk) : b(blk) {}
  gpt::block& b;
  nn::layer_norm::cache<strata::host> ln1, ln2;
  nn::causal_self_attention::cache<strata::host> attn;
  nn::column_parallel_linear::cache<strata::host> fc1;
  nn::gelu::cache<strata::host> act;
  nn::row_parallel_linear::cache<strata::host> fc2;
  tensor<float> h1, x1, h2, u, g, dg, du, dh2, dx1, dh1;

  void forward(context& ctx, const tensor<float>& x, tensor<float>& y) {
    b.ln1.forward(ctx, x, h1, ln1);
    b.attn.forward(ctx, h1, x1, attn);
    nn::add_into(ctx, x1, x);
    b.ln2.forward(ctx, x1, h2, ln2);
    b.fc1.forward(ctx, h2, u, fc1);
    b.act.forward(ctx, u, g, act);
    b.fc2.forward(ctx, g, y, fc2);
    nn::add_into(ctx, y, x1);
  }
  void backward(context& ctx, const tensor<float>& dy, tensor<float>& dx) {
    b.fc2.backward(ctx, dy, dg, fc2);
    b.act.backward(ctx, dg, du, act);
    b.fc1.backward(ctx, du, dh2, fc1);
    b.ln2.backward(ctx, dh2, dx1, ln2);
    nn::add_into(ctx, dx1, dy);
    b.attn.backward(ctx, dx1, dh1, attn);
    b.ln1.backward(ctx, dh1, dx, ln1);
    nn::add_into(ctx, dx, dx1);
  }
};

}  // namespace

TEST_CASE("gpt's block makes h1, h2 and g again in backward: the bits of keeping them") {
  std::mt19937 rng(11);
  param_store store;
  const gpt::config cfg{.vocab = 8, .seq = 5, .dim = 16, .heads = 4, .layers = 2};
  auto bs = gpt::make_model(cfg).blocks;
  for (auto& b : bs) strata::for_each_param(b, [&](auto& p, std::string_view) { store.bind(p, rng, -0.3f, 0.3f); });
  const auto x = random_tensor(shape{2, 5, 16}, rng);
  const auto dy = random_tensor(shape{2, 5, 16}, rng);

  context plain;
  run_result ref;
  {
    kept_block k0(bs[0]), k1(bs[1]);
    tensor<float> mid, dmid;
    k0.forward(plain, x, mid);
    k1.forward(plain, mid, ref.y);
    k1.backward(plain, dy, dmid);
    k0.backward(plain, dmid, ref.dx);
    ref.grads = take_grads(bs);
  }
  std::vector<gpt::block::cache<strata::host>> own(2), shared(2);
  strata::scratch_pool pool;
  pooled_context lent;
  lent.pool = &pool;
  const run_result a = run(bs, plain, own, x, dy);
  const run_result b = run(bs, lent, shared, x, dy);
  const run_result c = run(bs, lent, shared, x, dy);  // a second step on the same caches
  for (const run_result* r : {&a, &b, &c}) {
    CHECK(same_bits(r->y.span(), ref.y.span()));
    CHECK(same_bits(r->dx.span(), ref.dx.span()));
    CHECK(same_bits(r->grads, ref.grads));
  }
  CHECK(ref.grads.size() > 0);
  for (const auto& cache : shared) CHECK(cache.work.own.h2.capacity() == 0);  // lent: the block keeps x1 and u only
}
