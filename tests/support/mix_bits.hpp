// 32 well-mixed bits of u (a murmur3 finalizer): test inputs that look random and are
// the same on every run.
#pragma once
#include <cstdint>

namespace strata_test {

constexpr std::uint32_t mix_bits(std::uint32_t u) {
  u ^= u >> 16;
  u *= 0x7feb352du;
  u ^= u >> 15;
  u *= 0x846ca68bu;
  return u ^ (u >> 16);
}

}  // namespace strata_test
