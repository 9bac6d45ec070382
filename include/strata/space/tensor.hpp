// tensor<T, Space>: an owning activation array of up to four dimensions. Its storage
// only grows, so a tensor reused across steps with the same shape never reallocates.
#pragma once
#include <algorithm>
#include <span>

#include "../core/buffer.hpp"
#include "../core/shape.hpp"
#include "host.hpp"

namespace strata {

template <class T, class Space = host>
class tensor {
 public:
  using value_type = T;
  using space_type = Space;

  tensor() = default;
  explicit tensor(const strata::shape& s) { resize(s); }

  // Sets the shape; reallocates only when the new shape needs more elements than the
  // storage holds. Contents are unspecified after a resize that reallocates (zeroed).
  void resize(const strata::shape& s) {
    if (s.numel() > storage_.size()) storage_ = buffer<T, Space>(s.numel());
    shape_ = s;
  }
  // resize, and make every element zero.
  void zeros(const strata::shape& s) {
    resize(s);
    Space::zero(storage_.data(), s.numel() * sizeof(T));
  }

  const strata::shape& shape() const noexcept { return shape_; }
  std::int64_t dim(std::size_t i) const noexcept { return shape_[i]; }
  std::size_t numel() const noexcept { return shape_.numel(); }
  std::size_t capacity() const noexcept { return storage_.size(); }
  T* data() noexcept { return storage_.data(); }
  const T* data() const noexcept { return storage_.data(); }
  std::span<T> span() noexcept { return {storage_.data(), numel()}; }
  std::span<const T> span() const noexcept { return {storage_.data(), numel()}; }
  T& operator[](std::size_t i) noexcept
  requires Space::host_accessible
  {
    return storage_.data()[i];
  }
  const T& operator[](std::size_t i) const noexcept
  requires Space::host_accessible
  {
    return storage_.data()[i];
  }

 private:
  buffer<T, Space> storage_;
  strata::shape shape_;
};

namespace detail {
// Member<Ctx> where a context declares it, else Default (a minimal context without it).
template <class Ctx, class Default, template <class> class Member>
struct context_member {
  using type = Default;
};
template <class Ctx, class Default, template <class> class Member>
requires requires { typename Member<Ctx>; }
struct context_member<Ctx, Default, Member> {
  using type = Member<Ctx>;
};
template <class Ctx>
using space_type_of = typename Ctx::space_type;
template <class Ctx>
using activation_type_of = typename Ctx::activation_type;
}  // namespace detail

// The space a context computes in (its space_type; host for a minimal context without
// one, such as a test's that only hands out targets).
template <class Ctx>
using space_of = typename detail::context_member<Ctx, host, detail::space_type_of>::type;
// The element type of the activations a context's layers pass (its activation_type):
// float, or the 16-bit compute type of a mixed-precision GPU trainer.
template <class Ctx>
using activation_of = typename detail::context_member<Ctx, float, detail::activation_type_of>::type;
// The activation tensor of a context: layers that run in more than one space and
// precision take `const tensor_for<Ctx>& x`.
template <class Ctx>
using tensor_for = tensor<activation_of<Ctx>, space_of<Ctx>>;
// A float tensor in the context's space, whatever its activations: token ids (exact in
// float up to 2^24, in 16 bits only up to 256 or 2048), targets, and a loss's value.
template <class Ctx>
using float_tensor_for = tensor<float, space_of<Ctx>>;

}  // namespace strata
