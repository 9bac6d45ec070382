// The fuzz targets over strata's file parsers: the safetensors header (with reads of
// what it accepts and a write/re-read round trip) and the DeepSpeed config parser.
// A target returns for any input; an escaping exception or a sanitizer report is a bug.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "strata/io/config.hpp"
#include "strata/io/safetensors.hpp"
#include "strata/train/from_config.hpp"

namespace io_fuzz {

// An accepted input that breaks a promise of the parser: report and abort, so both the
// mutation driver and libFuzzer record it as a crash with the input.
[[noreturn]] inline void broken(const char* what) {
  std::fprintf(stderr, "io fuzz: invariant broken: %s\n", what);
  std::abort();
}

// Returns true when the input was accepted.
inline bool fuzz_safetensors(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  try {
    const auto f = strata::safetensors_file::from_bytes(std::move(bytes), "fuzz.safetensors");
    const auto& h = f.header();
    if (f.data_offset() + h.data_bytes != size) broken("header + data != file size");
    std::uint64_t at = 0;
    strata::safetensors_writer w;
    w.metadata = h.metadata;
    std::vector<std::vector<std::byte>> keep;
    for (const auto& t : h.tensors) {
      if (t.begin != at || t.end > h.data_bytes || t.numel() * strata::size_of(t.dtype) != t.bytes())
        broken("accepted tensor does not tile the data area");
      at = t.end;
      std::vector<std::byte> raw(t.bytes());
      f.read_bytes(t.name, raw);
      if (!raw.empty() && std::memcmp(raw.data(), data + f.data_offset() + t.begin, raw.size()) != 0)
        broken("read_bytes returned other bytes than the file holds");
      if (t.dtype == strata::dtype::f32 || t.dtype == strata::dtype::f64 || t.dtype == strata::dtype::bf16 ||
          t.dtype == strata::dtype::f16)
        (void)f.read_all<float>(t.name);
      keep.push_back(std::move(raw));
      w.add(t.name, t.dtype, t.shape, keep.back());
    }
    // What was accepted writes back to a file that reads the same.
    const auto again = strata::safetensors_file::from_bytes(w.to_bytes(strata::safetensors_writer::order::as_added));
    if (again.metadata() != h.metadata || again.size() != h.tensors.size()) broken("round trip changed the header");
    for (std::size_t i = 0; i < h.tensors.size(); ++i) {
      const auto& a = h.tensors[i];
      const auto& b = again.header().tensors[i];
      if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.begin != b.begin || a.end != b.end)
        broken("round trip changed a tensor");
    }
    return true;
  } catch (const strata::checkpoint_error&) {
    return false;
  }
}

inline bool fuzz_config(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    strata::run_config c = strata::parse_config(text);
    (void)strata::unknown_keys_warning(c);
    (void)strata::to_runtime_policies(c);
    for (int dp : {1, 3, 8}) {
      try {
        c.resolve(dp);
        (void)strata::to_trainer_options(c);
      } catch (const strata::config_error&) {
      }
    }
    try {
      strata::dispatch(c, [](auto, auto, auto) { return 0; });
    } catch (const strata::config_error&) {
    }
    for (long k : {0L, 1L, 100L, 1000000L}) (void)c.schedule.lr(k);
    return true;
  } catch (const strata::config_error&) {
    return false;
  }
}

}  // namespace io_fuzz
