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
#include "../space/ops.hpp"
#include "../space/tensor.hpp"
#include "detail/activation_slot.hpp"

namespace strata {

namespace detail {
// The most specific cache a layer declares: cache<Space, Act>, cache<Space>, or cache.
template <class L, class Space, class Act>
constexpr auto pick_layer_cache() {
  if constexpr (requires { typename L::template cache<Space, Act>; })
    return std::type_identity<typename L::template cache<Space, Act>>{};
  else if constexpr (requires { typename L::template cache<Space>; })
    return std::type_identity<typename L::template cache<Space>>{};
  else if constexpr (requires { typename L::cache; })
    return std::type_identity<typename L::cache>{};
  else
    return std::type_identity<void>{};
}
}  // namespace detail

// A layer's per-micro-batch cache in a space and activation type: `template <class
// Space, class Act = float> struct cache` for layers that run in several spaces and
// precisions (its tensors live in that space, of that type), `template <class Space>
// struct cache` for float activations, or a plain `struct cache` for layers written for
// one space.
template <class L, class Space, class Act = float>
using layer_cache_t = typename decltype(detail::pick_layer_cache<L, Space, Act>())::type;

template <class L, class Space, class Act = float>
concept has_layer_cache = !std::is_void_v<layer_cache_t<L, Space, Act>>;

// Whether layer L runs with context Ctx on In tensors in and Out tensors out.
template <class L, class Ctx, class In, class Out>
concept layer_runs_with =
    requires(L& l, const L& cl, Ctx& ctx, const tensor<In, space_of<Ctx>>& x, tensor<Out, space_of<Ctx>>& y,
             const tensor<Out, space_of<Ctx>>& dy, tensor<In, space_of<Ctx>>& dx,
             layer_cache_t<L, space_of<Ctx>, activation_of<Ctx>>& c) {
      cl.forward(ctx, x, y, c);
      l.backward(ctx, dy, dx, c);
    };

// The element types a layer reads and writes in context Ctx: the context's activations
// where it takes them (tensor_for), float where it takes floats (an embedding's token
// ids in, a loss's value out, or a layer written with tensor<float>). With float
// activations both are float.
template <class L, class Ctx>
struct layer_io {
  using act = activation_of<Ctx>;
  static constexpr bool act_in = layer_runs_with<L, Ctx, act, act> ||
                                 (!layer_runs_with<L, Ctx, float, act> && layer_runs_with<L, Ctx, act, float>);
  static constexpr bool act_out = layer_runs_with<L, Ctx, act, act> || layer_runs_with<L, Ctx, float, act>;
  static constexpr bool runs = layer_runs_with<L, Ctx, act, act> || layer_runs_with<L, Ctx, float, act> ||
                               layer_runs_with<L, Ctx, act, float> || layer_runs_with<L, Ctx, float, float>;
  using in = std::conditional_t<act_in, act, float>;
  using out = std::conditional_t<act_out, act, float>;
};

// What the trainer needs of a layer (DESIGN §2), given the context type it runs with.
// Outputs are passed in (and reused across steps) so a step never allocates.
template <class L, class Ctx>
concept trainable_layer = has_layer_cache<L, space_of<Ctx>, activation_of<Ctx>> && layer_io<L, Ctx>::runs;

namespace detail {

template <class L, class Ctx>
constexpr bool check_trainable_layer() {
  static_assert(has_layer_cache<L, space_of<Ctx>, activation_of<Ctx>>,
                "strata: a layer needs a nested `struct cache { ... };` holding what its backward needs "
                "(an empty struct is fine), or `template <class Space, class Act = float> struct cache` to run in "
                "several spaces and precisions");
  static_assert(trainable_layer<L, Ctx>,
                "strata: a layer needs `template <class Ctx> void forward(Ctx&, const tensor_for<Ctx>& x, "
                "tensor_for<Ctx>& y, cache&) const` and `template <class Ctx> void backward(Ctx&, const "
                "tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache&)` for the trainer's space (a layer written "
                "with tensor<float> runs on the host only)");
  // A cache of one space holds float tensors: the layer's body would hand them to layers
  // that take the context's 16-bit activations, and fail deep inside. Say it here.
  static_assert(
      std::is_same_v<activation_of<Ctx>, float> || !layer_io<L, Ctx>::act_in ||
          !requires { typename L::template cache<space_of<Ctx>>; } ||
          requires { typename L::template cache<space_of<Ctx>, activation_of<Ctx>>; },
      "strata: this context passes 16-bit activations (a mixed-precision GPU trainer), and the layer's "
      "`template <class Space> struct cache` holds float tensors: declare `template <class Space, class "
      "Act = float> struct cache` with tensor<Act, Space> members, and take `cache<space_of<Ctx>, "
      "activation_of<Ctx>>&`");
  return true;
}

template <class Ctx>
struct layer_entry {
  // Between two layers: a tensor of the context's activations (with a float copy made
  // where a neighbour reads floats; see activation_slot.hpp).
  using slot_t = activation_slot_t<space_of<Ctx>, activation_of<Ctx>>;
  std::string name;
  void* layer = nullptr;
  std::vector<param<float>*> params;
  // std::vector<L::cache>, one per micro-batch slot; a recomputed layer has one scratch
  // cache, shared with every recomputed layer of its type.
  std::shared_ptr<void> caches;
  void* (*cache_at)(void* caches, std::size_t slot) = nullptr;
  void (*forward)(void* layer, Ctx&, slot_t&, slot_t&, void* cache) = nullptr;
  void (*backward)(void* layer, Ctx&, slot_t&, slot_t&, void* cache) = nullptr;
  bool counts_labels = false;  // a loss whose mean is over the labels not ignored
  bool recompute = false;      // forward runs again just before backward (see recomputes)
  // The layer reads (writes) floats rather than the context's activations; the same
  // when those are floats.
  bool reads_float = false, writes_float = false;

  void run_forward(Ctx& ctx, slot_t& x, slot_t& y, std::size_t slot) {
    forward(layer, ctx, x, y, cache_at(caches.get(), recompute ? 0 : slot));
  }
  void run_backward(Ctx& ctx, slot_t& dy, slot_t& dx, std::size_t slot) {
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
  using slot_t = typename layer_entry<Ctx>::slot_t;
  std::vector<layer_entry<Ctx>> table;
  std::map<std::type_index, std::shared_ptr<void>> scratch;  // per recomputed layer type
  for_each_layer(model, [&](auto& layer, std::string_view name, std::size_t) {
    using L = std::remove_cvref_t<decltype(layer)>;
    static_assert(check_trainable_layer<L, Ctx>());
    using cache_t = layer_cache_t<L, space_of<Ctx>, activation_of<Ctx>>;
    using in_t = typename layer_io<L, Ctx>::in;
    using out_t = typename layer_io<L, Ctx>::out;
    layer_entry<Ctx> e;
    e.name = std::string(name);
    e.layer = &layer;
    e.counts_labels = requires { L::counts_labels; };
    e.reads_float = std::is_same_v<in_t, float>;
    e.writes_float = std::is_same_v<out_t, float>;
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
    e.forward = [](void* l, Ctx& ctx, slot_t& x, slot_t& y, void* c) {
      const auto exec = exec_of(ctx);
      static_cast<const L*>(l)->forward(ctx, slot_read<in_t>(x, exec), slot_written<out_t>(y),
                                        *static_cast<cache_t*>(c));
    };
    e.backward = [](void* l, Ctx& ctx, slot_t& dy, slot_t& dx, void* c) {
      const auto exec = exec_of(ctx);
      static_cast<L*>(l)->backward(ctx, slot_read<out_t>(dy, exec), slot_written<in_t>(dx), *static_cast<cache_t*>(c));
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
