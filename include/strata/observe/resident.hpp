// A process's resident memory as the kernel counts it, next to which strata's memory
// report can be held: now (VmRSS), the peak so far (VmHWM of /proc/self/status), and a
// fresh start of that peak, so one phase of a run can be measured on its own.
#pragma once
#include <cstddef>
#include <fstream>
#include <string>

namespace strata {

namespace detail {

// A "Key: N kB" line of /proc/self/status, in bytes; 0 where there is none (not Linux).
inline std::size_t proc_status_bytes(const std::string& wanted) {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == wanted) {
      std::size_t kb = 0;
      f >> kb;
      return kb * 1024;
    }
    std::getline(f, key);
  }
  return 0;
}

}  // namespace detail

// This process's peak resident bytes so far (or since reset_peak_resident).
inline std::size_t peak_resident_bytes() { return detail::proc_status_bytes("VmHWM:"); }

// This process's resident bytes now.
inline std::size_t resident_bytes() { return detail::proc_status_bytes("VmRSS:"); }

// Restarts peak_resident_bytes from the resident bytes now (Linux 4.0 and later: "5" to
// /proc/self/clear_refs). False where the kernel does not allow it.
inline bool reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace strata
