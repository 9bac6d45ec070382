// The layer and model concepts: what Boost.PFR can reflect and strata can lay out, with
// a readable static_assert for each way a user's struct can fall short of it.
#pragma once
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/pfr.hpp>

#include "../core/dtype.hpp"
#include "detail/fields.hpp"
#include "param.hpp"

namespace strata {

template <class T, class Space>
class tensor;

// A class that may sit inside a layer but holds no params and is not walked: set it
// to true for your own such types (a tokenizer handle, a lookup table):
//   template <> struct strata::opaque_field<my_table> : std::true_type {};
template <class T>
struct opaque_field : std::false_type {};
template <class C, class Traits, class Alloc>
struct opaque_field<std::basic_string<C, Traits, Alloc>> : std::true_type {};
template <class T, class Space>
struct opaque_field<tensor<T, Space>> : std::true_type {};
template <>
struct opaque_field<bf16> : std::true_type {};
template <>
struct opaque_field<fp16> : std::true_type {};

namespace detail {

// Ranges of layers or of params: each element is walked, its index a path component.
// (g++ 12 crashes inside Boost.PFR 1.81's field count on an aggregate that has a
// std::array of non-trivial elements as a field: there, use std::vector.)
template <class T>
struct range_traits : std::false_type {};
template <class E, class A>
struct range_traits<std::vector<E, A>> : std::true_type {
  using element = E;
};
template <class E, std::size_t N>
struct range_traits<std::array<E, N>> : std::true_type {
  using element = E;
};
template <class T>
concept reflected_range = range_traits<std::remove_cv_t<T>>::value;
template <class T>
using range_element_t = typename range_traits<std::remove_cv_t<T>>::element;

// Fields that hold no params and are skipped: hyperparameters, pointers, strings.
template <class T>
concept ignored_field = std::is_scalar_v<std::remove_cv_t<T>> || opaque_field<std::remove_cv_t<T>>::value;

template <class T>
struct to_base_of {
  template <class B>
  requires(std::is_base_of_v<B, T> && !std::is_same_v<B, T>)
  operator B&() const;
};
// An aggregate's bases come before its fields in aggregate initialisation, so T
// initialisable from something that converts only to its bases has a base.
template <class T>
concept has_base_class = requires { T{to_base_of<T>{}}; };

template <class>
inline constexpr bool always_false = false;

// Where a type sits decides what the message calls it.
enum class role { model, layer, member };
enum class failure { not_aggregate, base_class, unassignable, not_a_layer };

template <role R, failure F, class T>
consteval void report() {
  if constexpr (R == role::model && F == failure::not_aggregate)
    static_assert(always_false<T>,
                  "strata: the model type is not an aggregate Boost.PFR can reflect: it has a user-declared "
                  "constructor, private or protected fields, or virtual functions. Make it a plain struct with "
                  "public fields and no constructors (build it in a factory function).");
  else if constexpr (R == role::model && F == failure::base_class)
    static_assert(always_false<T>,
                  "strata: the model type has a base class, which Boost.PFR cannot reflect. Make the base a "
                  "field instead of inheriting from it.");
  else if constexpr (R == role::model && F == failure::unassignable)
    static_assert(always_false<T>,
                  "strata: the model type has a reference or const field (or one that cannot be assigned), "
                  "which strata cannot reflect. Hold layers by value, not const.");
  else if constexpr (R == role::model && F == failure::not_a_layer)
    static_assert(always_false<T>,
                  "strata: every field of a model must be a layer (a struct holding params) or a std::vector / "
                  "std::array of layers. Wrap a lone param or value in a struct.");
  else if constexpr (R == role::layer && F == failure::not_aggregate)
    static_assert(always_false<T>,
                  "strata: a layer type is not an aggregate Boost.PFR can reflect: it has a user-declared "
                  "constructor, private or protected fields, or virtual functions. Make it a plain struct with "
                  "public fields and no constructors.");
  else if constexpr (R == role::layer && F == failure::base_class)
    static_assert(always_false<T>,
                  "strata: a layer type has a base class, which Boost.PFR cannot reflect. Make the base a field "
                  "instead of inheriting from it.");
  else if constexpr (R == role::layer && F == failure::unassignable)
    static_assert(always_false<T>,
                  "strata: a layer type has a reference or const field (or one that cannot be assigned), which "
                  "strata cannot reflect. Hold params and sub-layers by value, not const.");
  else if constexpr (R == role::member && F == failure::not_aggregate)
    static_assert(always_false<T>,
                  "strata: a field inside a layer is a class Boost.PFR cannot reflect (not an aggregate: a "
                  "user-declared constructor, private or protected fields, or virtual functions). Make it a plain "
                  "struct with public fields, or, if it holds no params, declare "
                  "template <> struct strata::opaque_field<T> : std::true_type {};");
  else if constexpr (R == role::member && F == failure::base_class)
    static_assert(always_false<T>,
                  "strata: a field inside a layer has a base class, which Boost.PFR cannot reflect. Make the base "
                  "a field instead of inheriting from it.");
  else if constexpr (R == role::member && F == failure::unassignable)
    static_assert(always_false<T>,
                  "strata: a field inside a layer has a reference or const field (or one that cannot be "
                  "assigned), which strata cannot reflect. Hold params by value, not const.");
}

// Checks that T itself can be handed to Boost.PFR; only then are its fields looked at,
// so a failure stops here with one message instead of an error deep inside PFR.
template <role R, bool Loud, class T>
consteval bool check_reflectable() {
  if constexpr (!std::is_class_v<T> || std::is_union_v<T> || !std::is_aggregate_v<T> || std::is_polymorphic_v<T>) {
    if constexpr (Loud) report<R, failure::not_aggregate, T>();
    return false;
  } else if constexpr (has_base_class<T>) {
    if constexpr (Loud) report<R, failure::base_class, T>();
    return false;
  } else {
    return true;
  }
}

// Run after T's fields passed: a type that still cannot be assigned has a reference or
// const field of its own (a deeper one was reported at its own type).
template <role R, bool Loud, class T>
consteval bool check_assignable() {
  if constexpr (!std::is_move_assignable_v<T>) {
    if constexpr (Loud) report<R, failure::unassignable, T>();
    return false;
  } else {
    return true;
  }
}

template <bool Loud, class T>
consteval bool check_member();
template <bool Loud, class T>
consteval bool check_model_field();
template <bool Loud, class M>
consteval bool check_model_fields();

template <bool Loud, class T>
consteval bool check_fields() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (check_member<Loud, detail::field_t<I, T>>() && ...);
  }(std::make_index_sequence<detail::field_count_v<T>>{});
}

// The whole check of an aggregate in role R. Nested `if constexpr`, not `&&`: each
// later check is instantiated only when the earlier ones passed, so PFR never sees a
// type it cannot reflect and a user sees one message.
template <role R, bool Loud, class T>
consteval bool check_aggregate() {
  if constexpr (!check_reflectable<R, Loud, T>()) {
    return false;
  } else {
    constexpr bool fields_ok = [] {
      if constexpr (R == role::model)
        return check_model_fields<Loud, T>();
      else
        return check_fields<Loud, T>();
    }();
    if constexpr (!fields_ok)
      return false;
    else
      return check_assignable<R, Loud, T>();
  }
}

// A field at any depth inside a layer (or an element of a range there).
template <bool Loud, class T>
consteval bool check_member() {
  using U = std::remove_cv_t<T>;
  if constexpr (is_param_v<U> || ignored_field<U>)
    return true;
  else if constexpr (reflected_range<U>)
    return check_member<Loud, range_element_t<U>>();
  else
    return check_aggregate<role::member, Loud, U>();
}

template <bool Loud, class T>
consteval bool check_layer() {
  return check_aggregate<role::layer, Loud, T>();
}

// A top-level field of a model: a layer, or a range of layers.
template <bool Loud, class T>
consteval bool check_model_field() {
  using U = std::remove_cv_t<T>;
  if constexpr (reflected_range<U>) {
    if constexpr (reflected_range<range_element_t<U>>) {
      if constexpr (Loud) report<role::model, failure::not_a_layer, U>();
      return false;
    } else {
      return check_model_field<Loud, range_element_t<U>>();
    }
  } else if constexpr (is_param_v<U> || ignored_field<U>) {
    if constexpr (Loud) report<role::model, failure::not_a_layer, U>();
    return false;
  } else {
    return check_layer<Loud, U>();
  }
}

template <bool Loud, class M>
consteval bool check_model_fields() {
  return []<std::size_t... I>(std::index_sequence<I...>) {
    return (check_model_field<Loud, detail::field_t<I, M>>() && ...);
  }(std::make_index_sequence<detail::field_count_v<M>>{});
}

template <bool Loud, class M>
consteval bool check_model() {
  return check_aggregate<role::model, Loud, M>();
}

}  // namespace detail

// An aggregate Boost.PFR can reflect whose fields, at any depth (nested aggregates,
// std::array, std::vector), are params, hyperparameters or opaque fields. Zero params
// is fine (an activation). forward/backward are the trainer's to check, not this.
template <class L>
concept layer = detail::check_layer<false, std::remove_cv_t<L>>();

// An aggregate whose fields, in order, are layers or std::vector / std::array of layers.
template <class M>
concept model = detail::check_model<false, std::remove_cv_t<M>>();

// static_assert(strata::check_model<M>()) reports why M is not a model, not just that.
template <class M>
consteval bool check_model() {
  return detail::check_model<true, std::remove_cv_t<M>>();
}
template <class L>
consteval bool check_layer() {
  return detail::check_layer<true, std::remove_cv_t<L>>();
}

}  // namespace strata
