// A process's resident memory as the kernel counts it, next to which strata's memory
// report can be held: the peak so far (VmHWM of /proc/self/status).
#pragma once
#include <cstddef>
#include <fstream>
#include <string>

namespace strata {

// This process's peak resident bytes so far; 0 where /proc/self/status is not there
// (not Linux).
inline std::size_t peak_resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      std::size_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return 0;
}

}  // namespace strata
