// Every nn/ building block: layers (linear, embedding, layer_norm, relu, gelu) and the
// losses (softmax_cross_entropy, mse) that a model's aggregate is made of.
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
#include "softmax_cross_entropy.hpp"
