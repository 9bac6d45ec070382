// The trainer's view of a model: one entry per layer in forward order, with type-erased
// forward/backward, the layer's params, and its per-micro-batch caches. Schedules
// (sequential, ZeRO-3 gathering, pipeline stages) work on layer indices only.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeindex>
#include <vector>

#include "../core/error.hpp"
#include "../model/param.hpp"
#include "../model/reflect.hpp"
#include "../space/tensor.hpp"

namespace strata {

namespace detail {
template <class L, class Space>
struct layer_cache {
  using type = typename L::cache;
};
template <class L, class Space>
requires requires { typename L::template cache<Space>; }
struct layer_cache<L, Space> {
  using type = typename L::template cache<Space>;
};
}  // namespace detail

// A layer's per-micro-batch cache in a space: `template <class Space> struct cache` for
// layers that run in several spaces (its tensors live in that space), or a plain
// `struct cache` for layers written for one.
template <class L, class Space>
using layer_cache_t = typename detail::layer_cache<L, Space>::type;

template <class L, class Space>
concept has_layer_cache = requires { typename L::cache; } || requires { typename L::template cache<Space>; };

// What the trainer needs of a layer (DESIGN §2), given the context type it runs with.
// Outputs are passed in (and reused across steps) so a step never allocates.
template <class L, class Ctx>
concept trainable_layer =
    has_layer_cache<L, typename Ctx::space_type> &&
    requires(L& l, const L& cl, Ctx& ctx, const tensor<float, typename Ctx::space_type>& in,
             tensor<float, typename Ctx::space_type>& out, layer_cache_t<L, typename Ctx::space_type>& c) {
      cl.forward(ctx, in, out, c);
      l.backward(ctx, in, out, c);
    };

namespace detail {

template <class L, class Ctx>
constexpr bool check_trainable_layer() {
  static_assert(has_layer_cache<L, typename Ctx::space_type>,
                "strata: a layer needs a nested `struct cache { ... };` holding what its backward needs "
                "(an empty struct is fine), or `template <class Space> struct cache` to run in several spaces");
  static_assert(trainable_layer<L, Ctx>,
                "strata: a layer needs `template <class Ctx> void forward(Ctx&, const tensor_for<Ctx>& x, "
                "tensor_for<Ctx>& y, cache&) const` and `template <class Ctx> void backward(Ctx&, const "
                "tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache&)` for the trainer's space (a layer written "
                "with tensor<float> runs on the host only)");
  return true;
}

template <class Ctx>
struct layer_entry {
  using tensor_t = tensor<float, typename Ctx::space_type>;
  std::string name;
  void* layer = nullptr;
  std::vector<param<float>*> params;
  // std::vector<L::cache>, one per micro-batch slot; a recomputed layer has one scratch
  // cache, shared with every recomputed layer of its type.
  std::shared_ptr<void> caches;
  void* (*cache_at)(void* caches, std::size_t slot) = nullptr;
  void (*forward)(void* layer, Ctx&, const tensor_t&, tensor_t&, void* cache) = nullptr;
  void (*backward)(void* layer, Ctx&, const tensor_t&, tensor_t&, void* cache) = nullptr;
  bool counts_labels = false;  // a loss whose mean is over the labels not ignored
  bool recompute = false;      // forward runs again just before backward (see recomputes)

  void run_forward(Ctx& ctx, const tensor_t& x, tensor_t& y, std::size_t slot) {
    forward(layer, ctx, x, y, cache_at(caches.get(), recompute ? 0 : slot));
  }
  void run_backward(Ctx& ctx, const tensor_t& dy, tensor_t& dx, std::size_t slot) {
    backward(layer, ctx, dy, dx, cache_at(caches.get(), recompute ? 0 : slot));
  }
};

// Whether trainer_options::recompute names a layer: a pattern is a layer's name or a
// prefix of it up to a dot ("layers" names layers.0, layers.1, ...; "layers.1" only that one).
inline bool recomputes(const std::vector<std::string>& patterns, std::string_view layer) {
  for (const auto& p : patterns)
    if (layer == p || (layer.size() > p.size() && layer.starts_with(p) && layer[p.size()] == '.')) return true;
  return false;
}

// Builds the entries of a model; `slots` caches per layer let that many micro-batches
// be in flight (1 without a pipeline). The layers `recompute` names keep no cache between
// their forward and backward: what they hold lives in one scratch cache per layer type,
// which the schedule refills by running forward again just before backward.
template <class Ctx, class Model>
std::vector<layer_entry<Ctx>> make_layer_table(Model& model, std::size_t slots,
                                               const std::vector<std::string>& recompute = {}) {
  using tensor_t = typename layer_entry<Ctx>::tensor_t;
  std::vector<layer_entry<Ctx>> table;
  std::map<std::type_index, std::shared_ptr<void>> scratch;  // per recomputed layer type
  for_each_layer(model, [&](auto& layer, std::string_view name, std::size_t) {
    using L = std::remove_cvref_t<decltype(layer)>;
    static_assert(check_trainable_layer<L, Ctx>());
    using cache_t = layer_cache_t<L, typename Ctx::space_type>;
    layer_entry<Ctx> e;
    e.name = std::string(name);
    e.layer = &layer;
    e.counts_labels = requires { L::counts_labels; };
    for_each_param(layer, [&](auto& p, std::string_view) {
      static_assert(std::is_same_v<std::remove_cvref_t<decltype(p)>, param<float>>,
                    "strata: the trainer trains param<float> (16-bit precision is a trainer policy)");
      e.params.push_back(&p);
    });
    e.recompute = recomputes(recompute, name);
    if (!e.recompute)
      e.caches = std::make_shared<std::vector<cache_t>>(slots);
    else if (auto& shared = scratch[std::type_index(typeid(L))])
      e.caches = shared;
    else
      e.caches = shared = std::make_shared<std::vector<cache_t>>(1);
    e.cache_at = [](void* c, std::size_t s) -> void* { return &(*static_cast<std::vector<cache_t>*>(c))[s]; };
    e.forward = [](void* l, Ctx& ctx, const tensor_t& x, tensor_t& y, void* c) {
      static_cast<const L*>(l)->forward(ctx, x, y, *static_cast<cache_t*>(c));
    };
    e.backward = [](void* l, Ctx& ctx, const tensor_t& dy, tensor_t& dx, void* c) {
      static_cast<L*>(l)->backward(ctx, dy, dx, *static_cast<cache_t*>(c));
    };
    table.push_back(std::move(e));
  });
  for (const auto& p : recompute) {
    bool named = false;
    for (const auto& e : table) named = named || recomputes({p}, e.name);
    expects<config_error>(named, [&] {
      std::string names;
      for (const auto& e : table) names += (names.empty() ? "" : ", ") + e.name;
      return cat("strata::trainer: recompute names \"", p, "\", which is no layer of the model (its layers: ", names,
                 ")");
    });
  }
  // The last layer reads the micro-batch's targets, which a pipeline has moved past by
  // the time that micro-batch goes backward; recomputing it would save nothing anyway.
  expects<config_error>(table.empty() || !table.back().recompute, [&] {
    return cat("strata::trainer: recompute names the model's last layer ", table.back().name,
               " (the loss); name the layers before it");
  });
  return table;
}

}  // namespace detail
}  // namespace strata
