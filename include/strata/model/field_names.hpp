// field_names<T>(): the names of an aggregate's fields, in declaration order, as a
// compile-time std::array<std::string_view, N>; they make the dotted parameter names.
#pragma once
#include <array>
#include <concepts>
#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/pfr.hpp>

#include <boost/version.hpp>
#include "detail/fields.hpp"

#if BOOST_VERSION >= 108400
#include <boost/pfr/core_name.hpp>
#endif

// Where the names come from, first that applies:
//  1. names the type declares itself, to rename fields or where the compiler trick
//     below cannot work (a compiler whose signatures it cannot parse):
//       struct attn { strata::nn::linear q, k, v;
//                     static constexpr std::array<std::string_view, 3> field_names{"q", "k", "v"}; };
//     A struct local to a function cannot have static data members; it may declare
//       static constexpr std::array<std::string_view, 3> field_names() { return {"q", "k", "v"}; }
//  2. Boost.PFR's names_as_array (Boost >= 1.84, when PFR enables it for the compiler);
//  3. the in-house helper below (Boost 1.81 to 1.83), the technique PFR >= 2.1 uses.
#if BOOST_VERSION >= 108400 && BOOST_PFR_CORE_NAME_ENABLED
#define STRATA_FIELD_NAMES_FROM_PFR 1
#else
#define STRATA_FIELD_NAMES_FROM_PFR 0
#endif

namespace strata {
namespace detail {

template <class T>
concept declares_field_names_array = requires {
  { T::field_names.size() } -> std::convertible_to<std::size_t>;
  { std::string_view(T::field_names[0]) };
};
template <class T>
concept declares_field_names_function = requires {
  { T::field_names().size() } -> std::convertible_to<std::size_t>;
  { std::string_view(T::field_names()[0]) };
};
template <class T>
concept declares_field_names = declares_field_names_array<T> || declares_field_names_function<T>;

template <class T>
consteval auto declared_field_names() {
  if constexpr (declares_field_names_array<T>)
    return T::field_names;
  else
    return T::field_names();
}

template <class T>
struct fake_object_wrapper {
  const T value;
};
// Declared, never defined: only the addresses of its fields are taken, in constant
// expressions, so T needs no default constructor and no object is ever made.
template <class T>
extern const fake_object_wrapper<T> field_name_probe;

// A pointer wrapped in a class, so the template argument prints as the address
// expression ("&object.value.T::field") rather than as a plain number.
template <class P>
struct field_address {
  P ptr;
};

// The compiler spells the template argument, and thus the field's name, in this
// function's signature: g++ "...[with auto FieldAddress = field_address<const int*>{(& ...::T::weight)}; ...]",
// clang "...[FieldAddress = field_address<const int *>{&....weight}]".
template <auto FieldAddress>
consteval std::string_view signature_with_field() {
  return __PRETTY_FUNCTION__;
}

constexpr bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The field name: the last identifier in the spelling of FieldAddress, which ends at
// the first unbalanced closing bracket or top-level ';'.
constexpr std::string_view field_in_signature(std::string_view s) {
  constexpr std::string_view marker = "FieldAddress = ";
  const std::size_t at = s.find(marker);
  if (at == std::string_view::npos) return {};
  s.remove_prefix(at + marker.size());
  std::size_t end = 0;
  for (int depth = 0; end < s.size(); ++end) {
    const char c = s[end];
    if (c == '(' || c == '{' || c == '[' || c == '<') {
      ++depth;
    } else if (c == ')' || c == '}' || c == ']' || c == '>') {
      if (depth == 0) break;
      --depth;
    } else if (c == ';' && depth == 0) {
      break;
    }
  }
  s = s.substr(0, end);
  while (!s.empty() && !is_identifier_char(s.back())) s.remove_suffix(1);
  std::size_t begin = s.size();
  while (begin > 0 && is_identifier_char(s[begin - 1])) --begin;
  return s.substr(begin);
}

template <class T, std::size_t I>
consteval std::string_view parsed_field_name() {
  // std::addressof, not &: nvcc's front end does not take & of the returned reference here.
  constexpr auto* address = std::addressof(detail::field<I>(field_name_probe<T>.value));
  return field_in_signature(signature_with_field<field_address<decltype(address)>{address}>());
}

// A copy of the name with static storage of its own, so the views handed out do not
// point into a function's signature string.
template <class T, std::size_t I>
struct stored_field_name {
  static constexpr std::string_view parsed = parsed_field_name<T, I>();
  static constexpr std::array<char, parsed.size() + 1> chars = [] {
    std::array<char, parsed.size() + 1> a{};
    for (std::size_t i = 0; i < parsed.size(); ++i) a[i] = parsed[i];
    return a;
  }();
  static constexpr std::string_view value{chars.data(), parsed.size()};
};

constexpr bool is_identifier(std::string_view s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s)
    if (!is_identifier_char(c)) return false;
  return true;
}

template <class T>
consteval auto compute_field_names() {
  constexpr std::size_t n = detail::field_count_v<T>;
  if constexpr (declares_field_names<T>) {
    // A count that differs is reported by field_names(); unnamed fields stay empty.
    constexpr auto declared = declared_field_names<T>();
    std::array<std::string_view, n> names{};
    for (std::size_t i = 0; i < n && i < declared.size(); ++i) names[i] = declared[i];
    return names;
  } else if constexpr (n == 0) {
    return std::array<std::string_view, 0>{};
  } else {
#if STRATA_FIELD_NAMES_FROM_PFR
    return boost::pfr::names_as_array<T>();
#else
    return []<std::size_t... I>(std::index_sequence<I...>) {
      return std::array<std::string_view, n>{stored_field_name<T, I>::value...};
    }(std::make_index_sequence<n>{});
#endif
  }
}

template <class T>
inline constexpr auto field_names_of = compute_field_names<T>();

template <class T>
consteval bool declared_count_matches() {
  if constexpr (declares_field_names<T>)
    return declared_field_names<T>().size() == detail::field_count_v<T>;
  else
    return true;
}

template <class T>
consteval bool field_names_valid() {
  for (auto name : field_names_of<T>)
    if (!is_identifier(name)) return false;
  for (std::size_t i = 0; i < field_names_of<T>.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (field_names_of<T>[i] == field_names_of<T>[j]) return false;
  return true;
}

}  // namespace detail

// The field names of the aggregate T (which must be reflectable by Boost.PFR; see
// model/concepts.hpp), usable in constant expressions.
template <class T>
constexpr const std::array<std::string_view, detail::field_count_v<T>>& field_names() {
  if constexpr (!detail::declared_count_matches<T>())
    static_assert(detail::declared_count_matches<T>(),
                  "strata: the type's static field_names must name every field, in declaration order");
  else if constexpr (detail::declares_field_names<T>)
    static_assert(detail::field_names_valid<T>(), "strata: the type's static field_names must be distinct identifiers");
  else
    static_assert(detail::field_names_valid<T>(),
                  "strata: could not read this type's field names from the compiler; declare them on the type: "
                  "static constexpr std::array<std::string_view, N> field_names{\"a\", \"b\", ...};");
  return detail::field_names_of<T>;
}

}  // namespace strata
