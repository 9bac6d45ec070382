// Every nn/ building block: layers (linear, embedding, layer_norm, relu, gelu, attention),
// residual adds, the losses (softmax_cross_entropy, mse) and the tensor-parallel forms.
#pragma once
#include "attention.hpp"
#include "context.hpp"
#include "embedding.hpp"
#include "gelu.hpp"
#include "layer_norm.hpp"
#include "linear.hpp"
#include "mse.hpp"
#include "position_embedding.hpp"
#include "relu.hpp"
#include "residual.hpp"
#include "softmax_cross_entropy.hpp"
#include "tp/all.hpp"
