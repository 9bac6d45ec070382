// detail::function_ref<R(Args...)>: a non-owning reference to a callable, for callbacks
// that cross a boundary compiled once (C++26's std::function_ref, which GCC 12 lacks).
// A template taking the callable's own type is compiled again for every caller's lambda:
// with a program that dispatches over many trainers, that is most of its compile time.
#pragma once
#include <memory>
#include <type_traits>
#include <utility>

namespace strata::detail {

template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
 public:
  // Refers to f, which must outlive the calls (a callback argument does).
  template <class F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
  function_ref(F&& f) noexcept  // NOLINT(google-explicit-constructor): passed where the callable would be
      : object_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))), call_([](void* o, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(o))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

 private:
  void* object_;
  R (*call_)(void*, Args...);
};

}  // namespace strata::detail
