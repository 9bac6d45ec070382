// One boundary between two layers in a trainer: the tensor a layer writes and the next
// reads (and, going back, the gradient between them). Layers pass activations of the
// context's type (tensor_for: 16 bits in a mixed GPU trainer) but some read or write
// floats (an embedding reads token ids, a loss writes its value, a layer written for
// floats takes floats), so where a mixed trainer's neighbours disagree the slot converts
// once, on the reading side. With float activations the slot is a plain tensor.
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "../../space/ops.hpp"
#include "../../space/tensor.hpp"

namespace strata::detail {

template <class Space, class Act>
class activation_slot {
  static_assert(!std::is_same_v<Act, float>, "strata: float activations need no slot (a plain tensor)");

 public:
  // The tensor of type T, for a layer to write: the other type's copy is stale from now.
  template <class T>
  tensor<T, Space>& written() {
    holds_[index<T>] = true;
    holds_[1 - index<T>] = false;
    return get<T>();
  }
  // The tensor of type T, for a layer to read: converted (rounded to nearest even, or
  // widened exactly) from the other type when only that one was written.
  template <class T>
  const tensor<T, Space>& read(const executor<Space>& exec) {
    constexpr int other = 1 - index<T>;
    if (!holds_[index<T>] && holds_[other]) {
      using U = std::conditional_t<std::is_same_v<T, float>, Act, float>;
      const tensor<U, Space>& from = get<U>();
      get<T>().resize(from.shape());
      convert(exec, static_cast<std::int64_t>(from.numel()), from.data(), get<T>().data());
      holds_[index<T>] = true;
    }
    return get<T>();
  }

 private:
  template <class T>
  static constexpr int index = std::is_same_v<T, float> ? 1 : 0;
  template <class T>
  tensor<T, Space>& get() {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, Act>, "strata: a slot holds Act or float");
    if constexpr (std::is_same_v<T, float>)
      return wide_;
    else
      return narrow_;
  }

  tensor<Act, Space> narrow_;
  tensor<float, Space> wide_;
  bool holds_[2] = {false, false};
};

// The slot between layers whose activations are Act in Space.
template <class Space, class Act>
using activation_slot_t =
    std::conditional_t<std::is_same_v<Act, float>, tensor<float, Space>, activation_slot<Space, Act>>;

template <class T, class Space>
tensor<T, Space>& slot_written(tensor<T, Space>& t) {
  return t;
}
template <class T, class Space>
const tensor<T, Space>& slot_read(tensor<T, Space>& t, const executor<Space>&) {
  return t;
}
template <class T, class Space, class Act>
tensor<T, Space>& slot_written(activation_slot<Space, Act>& s) {
  return s.template written<T>();
}
template <class T, class Space, class Act>
const tensor<T, Space>& slot_read(activation_slot<Space, Act>& s, const executor<Space>& exec) {
  return s.template read<T>(exec);
}

// f(the tensor a layer reads, or writes), of float where wide, else of Act: for code that
// learns the type at run time (a pipeline stage sends what its neighbour's layer reads).
template <class F, class Space>
void read_slot_as(tensor<float, Space>& t, bool, const executor<Space>&, F&& f) {
  f(std::as_const(t));
}
template <class F, class Space>
void write_slot_as(tensor<float, Space>& t, bool, F&& f) {
  f(t);
}
template <class F, class Space, class Act>
void read_slot_as(activation_slot<Space, Act>& s, bool wide, const executor<Space>& exec, F&& f) {
  if (wide)
    f(s.template read<float>(exec));
  else
    f(s.template read<Act>(exec));
}
template <class F, class Space, class Act>
void write_slot_as(activation_slot<Space, Act>& s, bool wide, F&& f) {
  if (wide)
    f(s.template written<float>());
  else
    f(s.template written<Act>());
}

}  // namespace strata::detail
