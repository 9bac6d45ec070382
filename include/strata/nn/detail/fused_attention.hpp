// Whether attention runs fused on a GPU: cuDNN's flash attention (cudnn_attention.hpp) in
// CUDA translation units of a build with cuDNN's headers (STRATA_HAS_CUDNN, given by the
// strata::cudnn target), for 16-bit activations; the unfused GEMMs elsewhere.
#pragma once
#include <type_traits>

#include "../../core/config.hpp"
#include "../../core/error.hpp"
#include "../../space/tensor.hpp"
#include "attention_layout.hpp"

#ifndef STRATA_HAS_CUDNN
#define STRATA_HAS_CUDNN 0
#endif
#if STRATA_HAS_CUDNN && STRATA_HAS_CUDA && defined(__CUDACC__)
#include "cudnn_attention.hpp"
#define STRATA_FUSED_ATTENTION 1
#else
#define STRATA_FUSED_ATTENTION 0
#endif

namespace strata::nn {

// Whether this build can run attention fused on a GPU (it found cuDNN's headers). Whether
// a run does is decided when cuDNN loads (cudnn_attention.hpp).
inline constexpr bool fused_attention_built = STRATA_HAS_CUDNN != 0;

}  // namespace strata::nn

namespace strata::nn::detail {

template <class Ctx, class T>
inline constexpr bool fusable_attention = [] {
#if STRATA_FUSED_ATTENTION
  return std::is_same_v<space_of<Ctx>, cuda> && !std::is_same_v<T, float>;
#else
  return false;
#endif
}();

// Whether attention of layout l on activations T runs fused in ctx's space.
template <class T, class Ctx>
bool fused_attention_takes(Ctx&, const attention_layout& l) {
#if STRATA_FUSED_ATTENTION
  if constexpr (fusable_attention<Ctx, T>) return cudnn_attention::instance().find<T>(l) != nullptr;
#endif
  (void)l;
  return false;
}

// out and lse [B, H, S] from q, k, v; only where fused_attention_takes.
template <class Ctx, class T>
void fused_attention_forward(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v, float* lse,
                             T* out) {
#if STRATA_FUSED_ATTENTION
  if constexpr (fusable_attention<Ctx, T>) {
    expects(cudnn_attention_forward(exec_of(ctx), l, q, k, v, lse, out), "attention: cuDNN's plan went missing");
    return;
  }
#endif
  (void)ctx, (void)l, (void)q, (void)k, (void)v, (void)lse, (void)out;
  throw error("attention: the fused form is not in this build (a forward took it?)");
}

// dq, dk, dv (written) from what fused_attention_forward saved.
template <class Ctx, class T>
void fused_attention_backward(Ctx& ctx, const attention_layout& l, const T* q, const T* k, const T* v, const float* lse,
                              const T* out, const T* d_out, T* dq, T* dk, T* dv) {
#if STRATA_FUSED_ATTENTION
  if constexpr (fusable_attention<Ctx, T>) {
    expects(cudnn_attention_backward(exec_of(ctx), l, q, k, v, lse, out, d_out, dq, dk, dv),
            "attention: cuDNN's plan went missing");
    return;
  }
#endif
  (void)ctx, (void)l, (void)q, (void)k, (void)v, (void)lse, (void)out, (void)d_out, (void)dq, (void)dk, (void)dv;
  throw error("attention: the fused form is not in this build (a forward took it?)");
}

}  // namespace strata::nn::detail
