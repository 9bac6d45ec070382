// Every nn/ building block: layers (linear, embedding, layer_norm, rms_norm, relu, gelu,
// attention, grouped-query attention with rotary embedding, the SwiGLU MLP), residual adds,
// the losses (softmax_cross_entropy, mse) and the tensor-parallel forms.
#pragma once
#include "attention.hpp"
#include "context.hpp"
#include "embedding.hpp"
#include "gelu.hpp"
#include "grouped_query_attention.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "mse.hpp"
#include "position_embedding.hpp"
#include "relu.hpp"
#include "residual.hpp"
#include "rms_norm.hpp"
#include "rotary.hpp"
#include "softmax_cross_entropy.hpp"
#include "swiglu.hpp"
#include "tp/all.hpp"
