// nn::swiglu_mlp: the gated MLP of Llama and Qwen2, down(silu(gate(x)) * up(x)) without
// biases; gate and up are column-parallel and down row-parallel over ctx.tp() (Megatron's
// split), so the MLP costs one all-reduce forward and one backward (gate's and up's input
// gradients summed first: shared_input_backward).
#pragma once
#include <cmath>
#include <cstdint>

#include "../core/config.hpp"
#include "../core/dtype.hpp"
#include "../core/math.hpp"
#include "../space/call_scratch.hpp"
#include "../space/tensor.hpp"
#include "detail/checks.hpp"
#include "tp/column_parallel_linear.hpp"
#include "tp/row_parallel_linear.hpp"

namespace strata::nn {

namespace detail {

// silu(g) = g sigmoid(g), written as torch writes it: g / (1 + exp(-g)). gate, up and h
// of the activation type T: read as float, h rounded once.
template <class T = float>
struct swiglu_forward_fn {
  const T *gate, *up;
  T* h;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    const float g = static_cast<float>(gate[i]);
    h[i] = round_to<T>(g / (1.0f + math::exp(-g)) * static_cast<float>(up[i]));
  }
};

// From dh: d_up = dh silu(g) and d_gate = dh up silu'(g), silu'(g) = s (1 + g (1 - s)),
// in float from the activation type T, each rounded once. d_gate may be dh (element i is
// read before it is written), and d_up any tensor but gate, up or dh.
template <class T = float>
struct swiglu_backward_fn {
  const T *gate, *up, *dh;
  T *d_gate, *d_up;
  STRATA_HOST_DEVICE void operator()(std::int64_t i) const {
    const float g = static_cast<float>(gate[i]), d = static_cast<float>(dh[i]);
    const float s = math::sigmoid(g);
    d_up[i] = round_to<T>(d * (g / (1.0f + math::exp(-g))));
    d_gate[i] = round_to<T>(d * static_cast<float>(up[i]) * (s * (1.0f + g * (1.0f - s))));
  }
};

}  // namespace detail

struct swiglu_mlp {
  column_parallel_linear gate_proj;  // [I/T, D]
  column_parallel_linear up_proj;    // [I/T, D]
  row_parallel_linear down_proj;     // [D, I/T]

  // Every intermediate is a projection's output or input (a GEMM operand), so it is of the
  // activation type. The cache keeps gate and up; h = silu(gate) up, down_proj's input,
  // is made again from them in backward (one elementwise pass, the same bits; Liger's
  // SwiGLU does the same), so it lives only within a call, as the gradients do
  // (call_scratch.hpp): a third less of what the MLP keeps per layer. Within backward,
  // gate's and up's gradients take the places of dh and h, which are dead by then.
  template <class Space = host, class Act = float>
  struct scratch {
    tensor<Act, Space> h, dh;
  };
  template <class Space = host, class Act = float>
  struct cache {
    column_parallel_linear::cache<Space, Act> gate_proj, up_proj;
    row_parallel_linear::cache<Space, Act> down_proj;
    tensor<Act, Space> gate, up;  // [..., I/T]
    call_scratch<scratch<Space, Act>> work;
  };

  // x [..., D] -> y [..., D].
  template <class Ctx>
  void forward(Ctx& ctx, const tensor_for<Ctx>& x, tensor_for<Ctx>& y,
               cache<space_of<Ctx>, activation_of<Ctx>>& c) const {
    detail::require_distinct(&x, &y, kind, gate_proj.weight.name);
    gate_proj.forward(ctx, x, c.gate, c.gate_proj);
    up_proj.forward(ctx, x, c.up, c.up_proj);
    expects<config_error>(c.gate.shape() == c.up.shape(), [&] {
      return strata::cat(detail::label(kind, gate_proj.weight.name), ": gate_proj gives ", c.gate.shape(),
                         " but up_proj ", c.up.shape(), "; they must match");
    });
    auto& w = scratch_of(ctx, c.work);
    make_h(ctx, c, w.h);
    down_proj.forward(ctx, w.h, y, c.down_proj);
  }

  template <class Ctx>
  void backward(Ctx& ctx, const tensor_for<Ctx>& dy, tensor_for<Ctx>& dx, cache<space_of<Ctx>, activation_of<Ctx>>& c) {
    detail::require_forward_ran(c.gate_proj.x, kind, gate_proj.weight.name);
    detail::require_distinct(&dy, &dx, kind, gate_proj.weight.name);
    auto& g = scratch_of(ctx, c.work);
    // Other layers' calls have used the scratch since forward: h again, where down_proj's
    // backward reads its input.
    make_h(ctx, c, g.h);
    c.down_proj.x = &g.h;
    down_proj.backward(ctx, dy, g.dh, c.down_proj);
    // In place: d_gate over dh (each element read before it is written), d_up over h
    // (down_proj's backward was its last reader).
    auto &d_gate = g.dh, &d_up = g.h;
    ops_of<Ctx>::map(exec_of(ctx), static_cast<std::int64_t>(g.dh.numel()),
                     detail::swiglu_backward_fn<activation_of<Ctx>>{c.gate.data(), c.up.data(), g.dh.data(),
                                                                    d_gate.data(), d_up.data()});
    shared_input_backward(ctx, {{gate_proj, d_gate, c.gate_proj}, {up_proj, d_up, c.up_proj}}, dx);
  }

 private:
  static constexpr const char* kind = "swiglu_mlp";

  template <class Ctx>
  static void make_h(Ctx& ctx, const cache<space_of<Ctx>, activation_of<Ctx>>& c, tensor_for<Ctx>& h) {
    h.resize(c.gate.shape());
    ops_of<Ctx>::map(exec_of(ctx), static_cast<std::int64_t>(h.numel()),
                     detail::swiglu_forward_fn<activation_of<Ctx>>{c.gate.data(), c.up.data(), h.data()});
  }
};

// `dim` features through `intermediate` gated units, split over tp_size ranks; weights
// start like torch.nn.Linear's.
inline swiglu_mlp make_swiglu_mlp(int dim, int intermediate, int tp_rank = 0, int tp_size = 1) {
  return swiglu_mlp{make_column_parallel_linear(dim, intermediate, tp_rank, tp_size, false),
                    make_column_parallel_linear(dim, intermediate, tp_rank, tp_size, false),
                    make_row_parallel_linear(intermediate, dim, tp_rank, tp_size, false)};
}

}  // namespace strata::nn
