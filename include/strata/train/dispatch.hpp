// Maps a runtime choice (a --zero flag, a JSON config) onto the finite set of
// compile-time policies, calling f with one tag per policy: the one place where a
// string becomes a type.
#pragma once
#include <string>
#include <string_view>
#include <utility>

#include "../core/error.hpp"
#include "../optim/adamw.hpp"
#include "../optim/lion.hpp"
#include "../optim/sgd.hpp"
#include "../parallel/pipeline.hpp"
#include "../parallel/policies.hpp"
#include "../parallel/precision.hpp"

namespace strata {

template <class T>
struct type_tag {
  using type = T;
};

struct runtime_policies {
  int zero_stage = 0;               // 0 (replicated), 1, 2, 3
  bool offload = false;             // offload_optimizer (stages 1-3)
  std::string precision = "fp32";   // fp32 | bf16 | fp16
  std::string optimizer = "adamw";  // adamw | sgd | lion
  std::string schedule = "1f1b";    // 1f1b | gpipe (pipeline parallel only)
};

namespace detail {
template <class F>
decltype(auto) dispatch_sharding(const runtime_policies& p, F&& f) {
  expects<config_error>(p.zero_stage >= 0 && p.zero_stage <= 3,
                        cat("zero stage ", p.zero_stage, " is not one of 0, 1, 2, 3"));
  expects<config_error>(!(p.offload && p.zero_stage == 0),
                        "offload_optimizer needs ZeRO stage 1, 2 or 3 (got stage 0)");
  if (p.offload) {
    if (p.zero_stage == 1) return f(type_tag<zero<1, offload_optimizer>>{});
    if (p.zero_stage == 2) return f(type_tag<zero<2, offload_optimizer>>{});
    return f(type_tag<zero<3, offload_optimizer>>{});
  }
  if (p.zero_stage == 0) return f(type_tag<replicated>{});
  if (p.zero_stage == 1) return f(type_tag<zero<1>>{});
  if (p.zero_stage == 2) return f(type_tag<zero<2>>{});
  return f(type_tag<zero<3>>{});
}

template <class F>
decltype(auto) dispatch_precision(std::string_view name, F&& f) {
  if (name == "fp32") return f(type_tag<fp32>{});
  if (name == "bf16") return f(type_tag<mixed<bf16>>{});
  if (name == "fp16") return f(type_tag<mixed<fp16>>{});
  throw config_error(cat("precision '", name, "' is not one of fp32, bf16, fp16"));
}

template <class F>
decltype(auto) dispatch_schedule(std::string_view name, F&& f) {
  if (name == "1f1b") return f(type_tag<one_f_one_b>{});
  if (name == "gpipe") return f(type_tag<gpipe>{});
  throw config_error(cat("pipeline schedule '", name, "' is not one of gpipe, 1f1b"));
}

template <class F>
decltype(auto) dispatch_optimizer(std::string_view name, F&& f) {
  if (name == "adamw") return f(type_tag<adamw>{});
  if (name == "sgd") return f(type_tag<sgd>{});
  if (name == "lion") return f(type_tag<lion>{});
  throw config_error(cat("optimizer '", name, "' is not one of adamw, sgd, lion"));
}
}  // namespace detail

// Calls f(type_tag<Sharding>, type_tag<Optimizer>, type_tag<Precision>) for the
// policies named by p; config_error when a name or a combination is not valid.
template <class F>
decltype(auto) dispatch(const runtime_policies& p, F&& f) {
  return detail::dispatch_sharding(p, [&](auto s) -> decltype(auto) {
    return detail::dispatch_optimizer(p.optimizer, [&](auto o) -> decltype(auto) {
      return detail::dispatch_precision(p.precision, [&](auto pr) -> decltype(auto) { return f(s, o, pr); });
    });
  });
}

// Calls f(type_tag<Sharding>) alone, for programs that fix every other policy (a device
// trainer runs no pipeline, so its schedule is one).
template <class F>
decltype(auto) dispatch_sharding(const runtime_policies& p, F&& f) {
  return detail::dispatch_sharding(p, std::forward<F>(f));
}

// Calls f(type_tag<Sharding>, type_tag<Schedule>) for programs whose optimizer and
// precision are fixed (fewer instantiations).
template <class F>
decltype(auto) dispatch_sharding_schedule(const runtime_policies& p, F&& f) {
  return detail::dispatch_sharding(p, [&](auto s) -> decltype(auto) {
    return detail::dispatch_schedule(p.schedule, [&](auto sc) -> decltype(auto) { return f(s, sc); });
  });
}

// Calls f(type_tag<Sharding>, type_tag<Optimizer>) for programs that compile each
// precision in a translation unit of its own (the caller has chosen the precision).
template <class F>
decltype(auto) dispatch_sharding_optimizer(const runtime_policies& p, F&& f) {
  return detail::dispatch_sharding(p, [&](auto s) -> decltype(auto) {
    return detail::dispatch_optimizer(p.optimizer, [&](auto o) -> decltype(auto) { return f(s, o); });
  });
}

}  // namespace strata
