// Field access for reflected aggregates: Boost.PFR's count, types and get<I>, with two
// exceptions counted here.
// - Aggregates of exactly one field are read with a structured binding. nvcc's front end
//   (with Boost.PFR 1.81) cannot count them: PFR's probe that the first field is not a
//   base goes through a conversion to T itself, which nvcc instantiates and rejects; our
//   probe removes that conversion from overload resolution.
// - Aggregates that cannot be value-initialized (a reference field, or a layer holding
//   one: what concepts.hpp reports). PFR counts those by trying every count up to
//   sizeof(T) * CHAR_BIT, each with that many initializers: quadratic in the size, 80 s
//   and 10 GB of compiler memory for a small model with one tied reference. Such a T{}
//   fails because a field past the last initializer cannot be default-initialized, so
//   T{x1, ..., xj} compiles exactly for j in some [m, count]: counting up until it stops
//   compiling is linear in the count. Their fields are then read through PFR's
//   structured-binding tie for a given count (boost::pfr::detail, unchanged since 1.75).
#pragma once
#include <boost/pfr.hpp>

#include <climits>
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

// any_field, as an rvalue where T cannot be copied (so that move-only fields take it).
template <class T>
struct any_field_rvalue {
  template <class U>
  requires(!std::is_base_of_v<std::remove_cv_t<U>, T>)
  operator U&&() const noexcept;
};
template <class T>
using any_initializer = std::conditional_t<std::is_copy_constructible_v<T>, any_field<T>, any_field_rvalue<T>>;

template <class T, class Indices>
struct initializable_with : std::false_type {};
template <class T, std::size_t... I>
requires requires { T{(void(I), any_initializer<T>{})...}; }
struct initializable_with<T, std::index_sequence<I...>> : std::true_type {};

template <class T>
concept value_initializable_aggregate = std::is_aggregate_v<T> && requires { T{}; };

// The largest N in the run of well-formed T{x1, ..., xN} that starts at or after N.
template <class T, std::size_t N = 0, bool InRun = false>
consteval std::size_t count_by_initializers() {
  if constexpr (initializable_with<T, std::make_index_sequence<N>>::value)
    return count_by_initializers<T, N + 1, true>();
  else if constexpr (InRun)
    return N - 1;
  else if constexpr (N >= sizeof(T) * CHAR_BIT)
    return 0;  // not aggregate-initializable at all: concepts.hpp reports T before this
  else
    return count_by_initializers<T, N + 1, false>();
}

template <class T>
struct field_count : std::integral_constant<std::size_t, boost::pfr::tuple_size_v<T>> {};
template <single_field_aggregate T>
struct field_count<T> : std::integral_constant<std::size_t, 1> {};
template <class T>
requires(std::is_aggregate_v<T> && !value_initializable_aggregate<T> && !single_field_aggregate<T>)
struct field_count<T> : std::integral_constant<std::size_t, count_by_initializers<T>()> {};

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
  } else if constexpr (!value_initializable_aggregate<std::remove_cv_t<T>>) {
    using count = boost::pfr::detail::size_t_<field_count_v<T>>;
    return boost::pfr::detail::sequence_tuple::get<I>(boost::pfr::detail::tie_as_tuple(x, count{}));
  } else {
    return boost::pfr::get<I>(x);
  }
}

// The type of field I of T.
template <std::size_t I, class T>
using field_t = std::remove_reference_t<decltype(field<I>(std::declval<std::remove_cv_t<T>&>()))>;

}  // namespace strata::detail
