// ||a - b||_2 / ||b||_2, the relative distance tests compare vectors of floats by.
// Vectors of different lengths, or empty ones, are infinitely far apart: a check of the
// form `distance < tol` fails on them instead of comparing a prefix or nothing.
#pragma once
#include <cmath>
#include <limits>
#include <vector>

namespace test {

inline double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || b.empty()) return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace test
