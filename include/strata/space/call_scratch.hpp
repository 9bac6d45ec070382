// Tensors a layer uses only within one call of its forward or backward: the gradients
// that pass between its parts in backward, a GPU's blocks of attention scores. Kept in
// every layer's cache, they would hold one set per layer and micro-batch across the step
// (a 0.5B Qwen2 at 8 x 1024 tokens: 360 MB a layer, 8 GB in all); nothing reads them after
// the call, so a trainer lends one set per kind to every layer (scratch_pool, through
// its context), as PyTorch frees them when the call returns.
#pragma once
#include <map>
#include <memory>
#include <typeindex>
#include <typeinfo>

namespace strata {

// One S per type for every layer of a trainer: S is a layer's struct of call-scoped
// tensors (swiglu_mlp::scratch<Space, Act>, ...), whose storage only grows, so after the
// first step it holds the largest layer's and allocates no more. Calls of one trainer
// never overlap (its layers run one at a time); a layer whose S is in use by an
// enclosing call of the same S would be wrong, and no layer nests itself.
class scratch_pool {
 public:
  template <class S>
  S& get() {
    auto& p = items_[std::type_index(typeid(S))];
    if (!p) p = std::make_shared<S>();
    return *static_cast<S*>(p.get());
  }

 private:
  std::map<std::type_index, std::shared_ptr<void>> items_;
};

// A cache's call-scoped tensors: the context's pool lends them where it has one (a
// trainer's), and the cache's own serve elsewhere (a layer run by hand, a test's context).
template <class S>
struct call_scratch {
  S own;
};

// The S a layer's call uses: the pool's of ctx.scratch() where the context has one, else
// the cache's own.
template <class Ctx, class S>
S& scratch_of(Ctx& ctx, call_scratch<S>& c) {
  if constexpr (requires { ctx.scratch(); })
    if (scratch_pool* pool = ctx.scratch()) return pool->template get<S>();
  return c.own;
}

}  // namespace strata
