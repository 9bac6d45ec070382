// A 64-bit fingerprint of weights: FNV-1a over the bit patterns of the fp32 values in
// parameter order, printed as hex. Equal hashes mean bitwise equal weights.
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

namespace strata {

inline std::uint64_t weights_hash(std::span<const float> w) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (float f : w) {
    std::uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 0x100000001b3ull;
  }
  return h;
}

inline std::string hex64(std::uint64_t h) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

}  // namespace strata
