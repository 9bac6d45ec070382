// buffer<T, Space>: an owning, aligned, fixed-size array in a memory space. Buffers are
// sized and touched once, at construction: hot paths reuse them and never allocate.
#pragma once
#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

namespace strata {

// A memory space provides allocate(bytes) / deallocate(ptr, bytes) and says whether
// its memory is readable from the host. See space/host.hpp and space/cuda.hpp.
template <class S>
concept memory_space = requires(std::size_t n, void* p) {
  { S::allocate(n) } -> std::same_as<void*>;
  S::deallocate(p, n);
  { S::host_accessible } -> std::convertible_to<bool>;
};

template <class T, class Space>
class buffer {
  static_assert(std::is_trivially_copyable_v<T>, "strata::buffer holds trivially copyable elements only");

 public:
  using value_type = T;
  using space_type = Space;

  buffer() = default;
  // Allocates n elements and zero-fills them (this is the first touch, done once).
  explicit buffer(std::size_t n) : size_(n) {
    if (n) {
      data_ = static_cast<T*>(Space::allocate(n * sizeof(T)));
      Space::zero(data_, n * sizeof(T));
    }
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  buffer(buffer&& o) noexcept : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
    }
    return *this;
  }
  ~buffer() { release(); }

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::size_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  std::span<T> span() noexcept { return {data_, size_}; }
  std::span<const T> span() const noexcept { return {data_, size_}; }

  // Element access is only for host-readable spaces.
  T& operator[](std::size_t i) noexcept
  requires Space::host_accessible
  {
    return data_[i];
  }
  const T& operator[](std::size_t i) const noexcept
  requires Space::host_accessible
  {
    return data_[i];
  }
  T* begin() noexcept
  requires Space::host_accessible
  {
    return data_;
  }
  T* end() noexcept
  requires Space::host_accessible
  {
    return data_ + size_;
  }
  const T* begin() const noexcept
  requires Space::host_accessible
  {
    return data_;
  }
  const T* end() const noexcept
  requires Space::host_accessible
  {
    return data_ + size_;
  }

 private:
  void release() noexcept {
    if (data_) Space::deallocate(data_, size_ * sizeof(T));
    data_ = nullptr;
    size_ = 0;
  }
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace strata
