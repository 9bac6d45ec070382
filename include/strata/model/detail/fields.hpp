// Field access for reflected aggregates: Boost.PFR's count, types and get<I>, except for
// aggregates of exactly one field, which are read here with a structured binding. nvcc's
// front end (with Boost.PFR 1.81) cannot count one-field aggregates: PFR's probe that
// the first field is not a base goes through a conversion to T itself, which nvcc
// instantiates and rejects; our probe removes that conversion from overload resolution.
#pragma once
#include <boost/pfr.hpp>

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

namespace strata::detail {

// Converts to a reference of any type but T and T's bases, so `T{any_field<T>{}}` is
// aggregate initialization of T's first field and never a copy of T (declared only:
// used in unevaluated operands).
template <class T>
struct any_field {
  template <class U>
  requires(!std::is_base_of_v<std::remove_cv_t<U>, T>)
  operator U&() const noexcept;
};

template <class T>
concept single_field_aggregate =
    std::is_aggregate_v<T> && requires { T{any_field<T>{}}; } && !requires { T{any_field<T>{}, any_field<T>{}}; };

template <class T>
struct field_count : std::integral_constant<std::size_t, boost::pfr::tuple_size_v<T>> {};
template <single_field_aggregate T>
struct field_count<T> : std::integral_constant<std::size_t, 1> {};

// The number of fields of the aggregate T.
template <class T>
inline constexpr std::size_t field_count_v = field_count<std::remove_cv_t<T>>::value;

// Field I of x (a reference, const as x is).
template <std::size_t I, class T>
constexpr auto& field(T& x) noexcept {
  if constexpr (single_field_aggregate<std::remove_cv_t<T>>) {
    static_assert(I == 0);
    auto& [only] = x;
    return *std::addressof(only);  // the member itself (nvcc mistakes a bare `only` for a local)
  } else {
    return boost::pfr::get<I>(x);
  }
}

// The type of field I of T.
template <std::size_t I, class T>
using field_t = std::remove_reference_t<decltype(field<I>(std::declval<std::remove_cv_t<T>&>()))>;

}  // namespace strata::detail
