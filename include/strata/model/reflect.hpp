// Walks a user's model with Boost.PFR: every param with its dotted path
// ("blocks.3.fc1.weight"), and every layer in order ("embed", "blocks.0", ..., "head").
#pragma once
#include <charconv>
#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/pfr.hpp>

#include "concepts.hpp"
#include "detail/fields.hpp"
#include "field_names.hpp"
#include "param.hpp"

namespace strata {
namespace detail {

inline void push_component(std::string& path, std::string_view component) {
  if (!path.empty()) path += '.';
  path += component;
}

inline void push_index(std::string& path, std::size_t i) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, i).ptr;
  push_component(path, std::string_view(digits, static_cast<std::size_t>(end - digits)));
}

// Whether walking a T can meet a param, so that hyperparameters, strings and
// std::vector<float> fields are never iterated at run time.
template <class T>
consteval bool holds_params() {
  using U = std::remove_cv_t<T>;
  if constexpr (is_param_v<U>)
    return true;
  else if constexpr (ignored_field<U>)
    return false;
  else if constexpr (reflected_range<U>)
    return holds_params<range_element_t<U>>();
  else
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return (false || ... || holds_params<detail::field_t<I, U>>());
    }(std::make_index_sequence<detail::field_count_v<U>>{});
}

// path holds the dotted name of x on entry and is restored on exit; one string is
// reused for the whole walk.
template <class T, class F>
void walk_params(T& x, std::string& path, F& f) {
  using U = std::remove_cv_t<T>;
  if constexpr (is_param_v<U>) {
    f(x, std::string_view(path));
  } else if constexpr (!holds_params<U>()) {
    return;
  } else if constexpr (reflected_range<U>) {
    const std::size_t mark = path.size();
    std::size_t i = 0;
    for (auto& element : x) {
      push_index(path, i++);
      walk_params(element, path, f);
      path.resize(mark);
    }
  } else {
    const std::size_t mark = path.size();
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      ((push_component(path, field_names<U>()[I]), walk_params(detail::field<I>(x), path, f), path.resize(mark)), ...);
    }(std::make_index_sequence<detail::field_count_v<U>>{});
  }
}

// for_each_param with every name prefixed by `prefix.` (the layer's name in a model).
template <class Aggregate, class F>
void for_each_param_under(Aggregate& a, std::string prefix, F& f) {
  walk_params(a, prefix, f);
}

template <class Field, class F>
void visit_layer_field(Field& field, std::string_view field_name, std::string& name, std::size_t& index, F& f) {
  if constexpr (reflected_range<Field>) {
    std::size_t i = 0;
    for (auto& element : field) {
      name.assign(field_name);
      push_index(name, i++);
      f(element, std::string_view(name), index++);
    }
  } else {
    name.assign(field_name);
    f(field, std::string_view(name), index++);
  }
}

}  // namespace detail

// Calls f(param<T>& p, std::string_view name) for every param of a (layer, model,
// nested aggregate, std::vector or std::array of them) in declaration order; names are
// dotted paths relative to `a`, with range indices as components ("blocks.3.fc1.weight").
template <class Aggregate, class F>
void for_each_param(Aggregate& a, F&& f) {
  using A = std::remove_cv_t<Aggregate>;
  if constexpr (detail::reflected_range<A>) {
    if constexpr (detail::check_member<true, A>()) {
      std::string path;
      detail::walk_params(a, path, f);
    }
  } else if constexpr (check_layer<A>()) {
    std::string path;
    detail::walk_params(a, path, f);
  }
}

// Calls f(layer, std::string_view layer_name, std::size_t layer_index) for each layer
// of the model in order: a field is a layer named after it ("embed"); a std::vector or
// std::array field gives one layer per element ("blocks.3"). layer_index counts layers
// across the whole model.
template <class M, class F>
void for_each_layer(M& m, F&& f) {
  using A = std::remove_cv_t<M>;
  if constexpr (check_model<A>()) {
    std::string name;
    std::size_t index = 0;
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (detail::visit_layer_field(detail::field<I>(m), field_names<A>()[I], name, index, f), ...);
    }(std::make_index_sequence<detail::field_count_v<A>>{});
  }
}

// Sets param::name of every param of a model (or of a layer) to its dotted path.
template <class M>
void assign_names(M& m) {
  for_each_param(m, [](auto& p, std::string_view name) { p.name.assign(name); });
}

}  // namespace strata
