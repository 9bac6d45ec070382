// What a trainer's whole-model walks (weights hash, safetensors and Hugging Face
// exports) hold beyond its state, counted in its memory report as io_staging: one piece
// of weight_piece_elems values at a time, as 64-bit patterns (the all-reduce that
// assembles it), as floats, and as a writer's BF16 bytes. A checkpoint's verify reads
// fewer bytes at a time (io/detail/files.hpp, file_checksum64).
#pragma once
#include <cstddef>
#include <cstdint>

namespace strata::detail {

inline constexpr std::size_t weight_piece_elems = std::size_t{1} << 18;
inline constexpr std::size_t io_staging_bytes = weight_piece_elems * (sizeof(std::uint64_t) + sizeof(float) + 2);

}  // namespace strata::detail
