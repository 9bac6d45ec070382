// Helpers for the io/ tests: a private temporary directory, the message of the exception
// a call throws (checked by type), and hand-made safetensors files (header + data bytes).
#pragma once
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "catch.hpp"

namespace io_test {

// A fresh directory under the system temp dir, removed with everything in it.
class temp_dir {
 public:
  explicit temp_dir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("strata_io_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The what() of the E that f throws; "<no exception>" or "<other: ...>" otherwise, so a
// CHECK on the result shows what happened.
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<other: ") + e.what() + ">";
  }
  return "<no exception>";
}

inline void write_bytes(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline std::string read_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The 8-byte little-endian length prefix of n.
inline std::string le64(std::uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file from a header text and `data_bytes` zero bytes of data.
inline std::string raw_file(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\0');
}

}  // namespace io_test
