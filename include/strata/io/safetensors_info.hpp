// What a safetensors file holds, as safetensors_file::header() reports it (io/safetensors.hpp):
// each tensor's name, element type, extents and bytes, and the file's metadata.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../core/dtype.hpp"

namespace strata {

// One tensor of a safetensors file: element type, extents, and its bytes [begin, end)
// within the data area (which starts right after the header).
struct tensor_info {
  std::string name;
  strata::dtype dtype = dtype::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0, end = 0;

  std::uint64_t numel() const {
    std::uint64_t n = 1;
    for (auto d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
  std::uint64_t bytes() const { return end - begin; }
};

struct safetensors_header {
  std::vector<tensor_info> tensors;  // in data order (by offset)
  std::map<std::string, std::string> metadata;
  std::uint64_t header_bytes = 0;  // N: the JSON header with its padding
  std::uint64_t data_bytes = 0;    // the data area: file size - 8 - N
};

}  // namespace strata
