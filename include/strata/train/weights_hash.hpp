// A 64-bit fingerprint of weights: FNV-1a over the bytes of the fp32 values (least
// significant first) in parameter order, printed with hex64. Equal hashes mean bitwise
// equal weights.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/hash.hpp"

namespace strata {

// The hash fed piece by piece: add() the values in order, then value().
class weights_hasher {
 public:
  void add(std::span<const float> w) noexcept {
    for (float f : w) {
      std::uint32_t bits;
      std::memcpy(&bits, &f, 4);
      for (int b = 0; b < 4; ++b) h_ = fnv1a_byte(h_, static_cast<std::uint8_t>(bits >> (8 * b)));
    }
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  std::uint64_t h_ = fnv1a_offset;
};

inline std::uint64_t weights_hash(std::span<const float> w) {
  weights_hasher h;
  h.add(w);
  return h.value();
}

// The hash of a trainer's whole model (what weights_hash(tr.gather_master()) gives),
// streamed: no rank holds the model (collective). Also its element count.
template <class Trainer>
std::uint64_t weights_hash_of(Trainer& tr, std::size_t* elements = nullptr) {
  weights_hasher h;
  std::size_t n = 0;
  tr.for_each_weight_piece([&](std::size_t, std::size_t, std::span<const float> v) {
    h.add(v);
    n += v.size();
  });
  if (elements) *elements = n;
  return h.value();
}

}  // namespace strata
