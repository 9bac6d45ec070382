// param<T>: one named weight of a layer. A layer declares its params as fields; the
// owner of the flat parameter layout binds each param's data and grad to its place in
// the flat buffers, so a layer reads and writes its weights through plain pointers.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "../core/shape.hpp"

namespace strata {

// How a param is initialised when nothing is loaded into it. Values are drawn from a
// generator seeded by (seed, param name), so they do not depend on the process layout.
struct init_spec {
  enum class kind : std::uint8_t { zeros, ones, constant, normal, uniform };
  kind k = kind::zeros;
  float scale = 0.0f;  // stddev for normal, half-width for uniform, value for constant

  static init_spec zeros() { return {kind::zeros, 0.0f}; }
  static init_spec ones() { return {kind::ones, 1.0f}; }
  static init_spec constant(float v) { return {kind::constant, v}; }
  static init_spec normal(float stddev) { return {kind::normal, stddev}; }
  static init_spec uniform(float half_width) { return {kind::uniform, half_width}; }
};

template <class T = float>
struct param {
  using value_type = T;

  strata::shape shape;
  init_spec init;
  // Whether weight decay applies (AdamW by default decays matrices, not 1-D params).
  bool decay = true;

  // Tensor parallelism: this param may be the slice [shard_offset, shard_offset +
  // shape[shard_dim]) along shard_dim of a full tensor of shape full_shape (shard_dim -1:
  // the param is whole). Initialisation and consolidated export go through
  // global_index(), so every process layout sees the same full tensor.
  int shard_dim = -1;
  std::int64_t shard_offset = 0;
  strata::shape full_shape;

  // Set by reflection (model/reflect.hpp): the dotted field path, e.g. "blocks.3.fc1.weight".
  std::string name;
  // Tied weights (an LM head that is the input embedding): the dotted name of the param
  // this one is the same tensor as, or empty. A trainer starts both from that param's
  // values and sums their gradients, so the two stay one tensor (models/qwen2.hpp).
  std::string tied_to;
  // Bound by the owner of the flat layout; null until then.
  T* data_ptr = nullptr;
  T* grad_ptr = nullptr;

  param() = default;
  explicit param(strata::shape s, init_spec i = {}) : shape(s), init(i), decay(s.rank >= 2) {}

  std::size_t numel() const noexcept { return shape.numel(); }
  bool sharded() const noexcept { return shard_dim >= 0; }
  // Marks this param as a slice along `dim` of the full tensor `full`, starting at `offset`.
  void shard_of(strata::shape full, int dim, std::int64_t offset) {
    full_shape = full;
    shard_dim = dim;
    shard_offset = offset;
  }
  // Row-major index in the full tensor of local element `local`.
  std::size_t global_index(std::size_t local) const noexcept {
    if (shard_dim < 0) return local;
    std::size_t idx = 0, rem = local;
    std::size_t stride_local = numel(), stride_full = full_shape.numel();
    for (std::size_t d = 0; d < shape.rank; ++d) {
      stride_local /= static_cast<std::size_t>(shape[d] ? shape[d] : 1);
      stride_full /= static_cast<std::size_t>(full_shape[d] ? full_shape[d] : 1);
      std::size_t coord = stride_local ? rem / stride_local : 0;
      rem = stride_local ? rem % stride_local : 0;
      if (static_cast<int>(d) == shard_dim) coord += static_cast<std::size_t>(shard_offset);
      idx += coord * stride_full;
    }
    return idx;
  }
  bool bound() const noexcept { return data_ptr != nullptr; }
  T* data() noexcept { return data_ptr; }
  const T* data() const noexcept { return data_ptr; }
  T* grad() noexcept { return grad_ptr; }
  const T* grad() const noexcept { return grad_ptr; }
  std::span<T> values() noexcept { return {data_ptr, numel()}; }
  std::span<const T> values() const noexcept { return {data_ptr, numel()}; }
  std::span<T> grads() noexcept { return {grad_ptr, numel()}; }
  std::span<const T> grads() const noexcept { return {grad_ptr, numel()}; }
};

template <class P>
struct is_param : std::false_type {};
template <class T>
struct is_param<param<T>> : std::true_type {};
template <class P>
inline constexpr bool is_param_v = is_param<std::remove_cvref_t<P>>::value;

}  // namespace strata
