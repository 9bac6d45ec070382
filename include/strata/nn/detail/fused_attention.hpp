// Attention fused on a space's own kernels (the flash-attention algorithm: nothing [S, S]
// kept), where the space has them: fused_attention<Space> is empty, and a space that runs
// attention fused specialises it (the CUDA space through cuDNN, cudnn_attention.hpp, in
// CUDA translation units of a build with cuDNN's headers: STRATA_HAS_CUDNN, given by the
// strata::cudnn target). attention_core.hpp asks for it by its members, not by space.
#pragma once
#include <concepts>

#include "../../core/config.hpp"
#include "../../space/tensor.hpp"
#include "attention_layout.hpp"
#include "attention_workspace.hpp"

#ifndef STRATA_HAS_CUDNN
#define STRATA_HAS_CUDNN 0
#endif

namespace strata::nn {

// Whether this build can run attention fused on a GPU (it found cuDNN's headers). Whether
// a run does is decided when cuDNN loads (cudnn_attention.hpp).
inline constexpr bool fused_attention_built = STRATA_HAS_CUDNN != 0;

}  // namespace strata::nn

namespace strata::nn::detail {

// A space's fused attention, for activations T: static members
//   template <class T> bool takes(const attention_layout&)   whether it runs this shape
//   template <class T> void forward(exec, layout, q, k, v, float* lse, T* out)
//   template <class T> void backward(exec, layout, q, k, v, lse, out, d_out, dq, dk, dv)
// backward reading what forward saved (the output and each row's log-sum-exp [B, H, S]).
template <class Space>
struct fused_attention {};

// Whether Space has a fused attention for activations T.
template <class Space, class T>
concept has_fused_attention = requires(const attention_layout& l) {
  { fused_attention<Space>::template takes<T>(l) } -> std::same_as<bool>;
};

}  // namespace strata::nn::detail

#if STRATA_HAS_CUDNN && STRATA_HAS_CUDA && defined(__CUDACC__)
#include "cudnn_attention.hpp"
#endif
