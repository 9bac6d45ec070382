// A 64-bit fingerprint of weights: FNV-1a over the bytes of the fp32 values (least
// significant first) in parameter order, printed with hex64. Equal hashes mean bitwise
// equal weights.
#pragma once
#include <cstdint>
#include <cstring>
#include <span>

#include "../core/hash.hpp"

namespace strata {

inline std::uint64_t weights_hash(std::span<const float> w) {
  std::uint64_t h = fnv1a_offset;
  for (float f : w) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int b = 0; b < 4; ++b) h = fnv1a_byte(h, static_cast<std::uint8_t>(bits >> (8 * b)));
  }
  return h;
}

}  // namespace strata
