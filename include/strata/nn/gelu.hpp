// nn::gelu: x * Phi(x) elementwise, in the exact erf form (torch.nn.GELU's default) or the
// tanh approximation (torch.nn.GELU(approximate="tanh"), GPT-2's choice). No params.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../core/math.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"

namespace strata::nn {

enum class gelu_approximation : unsigned char { none, tanh };

namespace detail {

// The math of one element, shared by the host loops and the CUDA kernels (hence
// STRATA_HOST_DEVICE; strata::math vectorizes on the host, core/math.hpp).
struct gelu_erf {
  static constexpr float inv_sqrt2 = 0.70710678118654752f;
  static constexpr float inv_sqrt_2pi = 0.39894228040143268f;
  STRATA_HOST_DEVICE static float value(float x) { return 0.5f * x * (1.0f + math::erf(x * inv_sqrt2)); }
  // d/dx [x Phi(x)] = Phi(x) + x phi(x)
  STRATA_HOST_DEVICE static float derivative(float x) {
    return 0.5f * (1.0f + math::erf(x * inv_sqrt2)) + x * inv_sqrt_2pi * math::exp(-0.5f * x * x);
  }
};
// The tanh form through 0.5 (1 + tanh u) = sigmoid(2 u): one exp, about a fifth of what
// a tanh costs, and no cancellation in 1 + tanh u where u is very negative.
struct gelu_tanh {
  static constexpr float sqrt_2_over_pi = 0.79788456080286536f;
  static constexpr float c = 0.044715f;
  STRATA_HOST_DEVICE static float half_one_plus_tanh(float x) {
    return math::sigmoid(2.0f * sqrt_2_over_pi * (x + c * x * x * x));
  }
  STRATA_HOST_DEVICE static float value(float x) { return x * half_one_plus_tanh(x); }
  // 0.5 (1 + t) + 0.5 x (1 - t^2) u' with t = tanh u, u' = sqrt(2/pi) (1 + 3 c x^2), which
  // is s + 2 x s (1 - s) u' with s = sigmoid(2 u).
  STRATA_HOST_DEVICE static float derivative(float x) {
    const float s = half_one_plus_tanh(x);
    return s + 2.0f * x * s * (1.0f - s) * sqrt_2_over_pi * (1.0f + 3.0f * c * x * x);
  }
};

// x, y, dy and dx of the activation type T: read as float, the math in float, the
// result rounded once.
template <class Math, class T = float>  // Math: gelu_erf or gelu_tanh
struct gelu_forward_fn {
  const T* x;
  T* y;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    y[i] = round_to<T>(Math::value(static_cast<float>(x[i])));
  }
};
template <class Math, class T = float>
struct gelu_backward_fn {
  const T* x;
  const T* dy;
  T* dx;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    dx[i] = round_to<T>(static_cast<float>(dy[i]) * Math::derivative(static_cast<float>(x[i])));
  }
};

}  // namespace detail

struct gelu {
  gelu_approximation approximate = gelu_approximation::none;

  template <class Space = host, class Act = float>
  struct cache {
    const tensor<Act, Space>* x = nullptr;  // the input, kept alive by the trainer until backward
  };

  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_distinct(&x, &y, "gelu", std::string());
    y.resize(x.shape());
    using act = activation_of<Ctx>;
    const auto n = static_cast<std::int64_t>(x.numel());
    // The choice is outside the map so each loop is one straight-line body.
    if (approximate == gelu_approximation::tanh)
      ops_of<Ctx>::map(exec_of(ctx), n, detail::gelu_forward_fn<detail::gelu_tanh, act>{x.data(), y.data()});
    else
      ops_of<Ctx>::map(exec_of(ctx), n, detail::gelu_forward_fn<detail::gelu_erf, act>{x.data(), y.data()});
    c.x = &x;
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.x, "gelu", std::string());
    detail::require_dy(dy, c.x->shape(), "gelu", std::string());
    detail::require_distinct(&dy, &dx, "gelu", std::string());
    dx.resize(c.x->shape());
    backward_map(ctx, c.x->data(), dy.data(), dx.data(), static_cast<std::int64_t>(dy.numel()));
  }

  // d = d gelu'(x) in place: the gradient of GELU's input x from that of its output, for a
  // layer that fuses GELU into its own work and holds x (row_parallel_linear's backward
  // through GELU). The bits of backward with dy = d.
  template <class Ctx>
  void backward_at(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& d) const {
    detail::require_dy(d, x.shape(), "gelu", std::string());
    backward_map(ctx, x.data(), d.data(), d.data(), static_cast<std::int64_t>(d.numel()));
  }

 private:
  // Each element reads its dy before it writes its dx, so dx may be dy.
  template <class Ctx, class T>
  void backward_map(Ctx& ctx, const T* x, const T* dy, T* dx, std::int64_t n) const {
    if (approximate == gelu_approximation::tanh)
      ops_of<Ctx>::map(exec_of(ctx), n, detail::gelu_backward_fn<detail::gelu_tanh, T>{x, dy, dx});
    else
      ops_of<Ctx>::map(exec_of(ctx), n, detail::gelu_backward_fn<detail::gelu_erf, T>{x, dy, dx});
  }
};

}  // namespace strata::nn
