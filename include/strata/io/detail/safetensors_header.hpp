// The safetensors header: its parser and validator (every field checked against the
// file's size before anything trusts it) and its serializer, byte-compatible with the
// reference implementation (huggingface/safetensors).
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../core/dtype.hpp"
#include "../../core/error.hpp"
#include "../safetensors_info.hpp"

namespace strata {

static_assert(std::endian::native == std::endian::little,
              "strata's file formats are little-endian and are read and written without byte swaps");

namespace detail {

// The reference implementation refuses headers above 100 MB (MAX_HEADER_SIZE).
inline constexpr std::uint64_t safetensors_max_header = 100'000'000;
// Legitimate headers nest 3 deep (object, entry, shape); a bound keeps hostile input cheap.
inline constexpr int safetensors_max_depth = 16;

[[noreturn]] inline void st_fail(std::string_view file, const std::string& what) {
  throw checkpoint_error(cat(file, ": ", what));
}

inline std::string st_show(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

inline std::string st_dtype_names() {
  std::string s;
  for (auto t : {dtype::f64, dtype::f32, dtype::bf16, dtype::f16, dtype::i64, dtype::i32, dtype::i16, dtype::i8,
                 dtype::u64, dtype::u32, dtype::u16, dtype::u8})
    s += (s.empty() ? "" : ", ") + std::string(name_of(t));
  return s;
}

// A JSON integer >= 0 (the reference reads these as usize: no sign, no fraction).
inline bool st_unsigned(const nlohmann::json& j, std::uint64_t& out) {
  if (j.is_number_unsigned()) {
    out = j.get<std::uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<std::int64_t>() >= 0) {
    out = static_cast<std::uint64_t>(j.get<std::int64_t>());
    return true;
  }
  return false;
}

// Parses the 8-byte little-endian length prefix and checks it against the file size.
inline std::uint64_t parse_safetensors_prefix(std::span<const std::byte> first8, std::uint64_t file_size,
                                              std::string_view file) {
  if (file_size < 8 || first8.size() < 8)
    st_fail(file, cat("file is ", file_size, " bytes, shorter than the 8-byte header length of a safetensors file"));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<std::uint64_t>(first8[static_cast<std::size_t>(i)]);
  if (n > safetensors_max_header)
    st_fail(file,
            cat("header length ", n, " is above the 100 MB limit of the format (file corrupt or not safetensors)"));
  if (n > file_size - 8)
    st_fail(file, cat("header length ", n, " is beyond the end of the file (", file_size, " bytes; truncated?)"));
  if (n < 2) st_fail(file, cat("header length ", n, " is too short for a JSON object"));
  return n;
}

// Parses and validates the JSON header (`text`, N bytes) of a file whose data area is
// `data_bytes` long. Checks, as the reference does: a JSON object; each entry an object
// with a known dtype, a shape of non-negative integers and data_offsets [begin, end]
// with numel * size(dtype) == end - begin (no overflow); entries tile the data area
// exactly, from 0, without overlap or gap; __metadata__ maps strings to strings. Also
// rejects duplicate names, which a JSON parser would otherwise resolve silently.
inline safetensors_header parse_safetensors_header(std::string_view text, std::uint64_t data_bytes,
                                                   std::string_view file) {
  safetensors_header h;
  h.header_bytes = text.size();
  h.data_bytes = data_bytes;
  if (text.empty() || text.front() != '{') st_fail(file, "header is not a JSON object (it must start with '{')");

  std::set<std::string, std::less<>> seen;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(text.begin(), text.end(),
                                 [&](int depth, nlohmann::json::parse_event_t ev, nlohmann::json& value) {
                                   if (depth > safetensors_max_depth)
                                     st_fail(file, cat("header nests deeper than ", safetensors_max_depth, " levels"));
                                   if (ev == nlohmann::json::parse_event_t::key && depth == 1) {
                                     const auto& k = value.get_ref<const std::string&>();
                                     if (!seen.insert(k).second) st_fail(file, cat("header names \"", k, "\" twice"));
                                   }
                                   return true;
                                 });
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    if (auto p = what.find("] "); p != std::string::npos) what = what.substr(p + 2);
    st_fail(file, cat("header is not valid JSON: ", what));
  }
  if (!root.is_object()) st_fail(file, cat("header is not a JSON object: ", st_show(root)));

  for (auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) st_fail(file, cat("__metadata__ must be an object of strings, got ", st_show(entry)));
      for (auto& [k, v] : entry.items()) {
        if (!v.is_string()) st_fail(file, cat("__metadata__.\"", k, "\" must be a string, got ", st_show(v)));
        h.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    const std::string where = cat("tensor \"", name, "\": ");
    if (!entry.is_object())
      st_fail(file, cat(where, "entry must be an object {dtype, shape, data_offsets}, got ", st_show(entry)));
    tensor_info t;
    t.name = name;

    auto dt = entry.find("dtype");
    if (dt == entry.end()) st_fail(file, cat(where, "dtype is missing"));
    if (!dt->is_string()) st_fail(file, cat(where, "dtype must be a string, got ", st_show(*dt)));
    if (!parse_dtype(dt->get_ref<const std::string&>(), t.dtype))
      st_fail(file, cat(where, "dtype ", st_show(*dt), " is not one strata reads (", st_dtype_names(), ")"));

    auto sh = entry.find("shape");
    if (sh == entry.end()) st_fail(file, cat(where, "shape is missing"));
    if (!sh->is_array()) st_fail(file, cat(where, "shape must be an array of integers >= 0, got ", st_show(*sh)));
    std::uint64_t numel = 1;
    bool overflow = false;
    for (auto& d : *sh) {
      std::uint64_t v = 0;
      if (!st_unsigned(d, v) || v > static_cast<std::uint64_t>(INT64_MAX))
        st_fail(file, cat(where, "shape must be an array of integers >= 0, got ", st_show(*sh)));
      t.shape.push_back(static_cast<std::int64_t>(v));
      if (v != 0 && numel > UINT64_MAX / v) overflow = true;
      numel *= v;
    }

    auto off = entry.find("data_offsets");
    if (off == entry.end()) st_fail(file, cat(where, "data_offsets is missing"));
    if (!off->is_array() || off->size() != 2 || !st_unsigned((*off)[0], t.begin) || !st_unsigned((*off)[1], t.end))
      st_fail(file, cat(where, "data_offsets must be [begin, end] with integers >= 0, got ", st_show(*off)));
    if (t.end < t.begin) st_fail(file, cat(where, "data_offsets [", t.begin, ", ", t.end, "] end before they begin"));
    if (t.end > data_bytes)
      st_fail(file, cat(where, "data_offsets [", t.begin, ", ", t.end, "] are beyond the data area (", data_bytes,
                        " bytes)"));
    // A product that overflows would be far beyond any data area: report it as such.
    const std::uint64_t esize = size_of(t.dtype);
    if (overflow || (numel != 0 && numel > UINT64_MAX / esize))
      st_fail(file, cat(where, "shape ", st_show(*sh), " overflows a 64-bit byte count"));
    if (numel * esize != t.bytes())
      st_fail(file, cat(where, "shape ", st_show(*sh), " of ", name_of(t.dtype), " is ", numel * esize,
                        " bytes but data_offsets [", t.begin, ", ", t.end, "] span ", t.bytes()));
    h.tensors.push_back(std::move(t));
  }

  // The data area is tiled in offset order: each tensor starts where the previous ended.
  std::sort(h.tensors.begin(), h.tensors.end(), [](const tensor_info& a, const tensor_info& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  std::uint64_t at = 0;
  const tensor_info* prev = nullptr;
  for (const auto& t : h.tensors) {
    if (t.begin < at)
      st_fail(file, cat("tensor \"", t.name, "\": data_offsets [", t.begin, ", ", t.end, "] overlap tensor \"",
                        prev->name, "\" [", prev->begin, ", ", prev->end, "]"));
    if (t.begin > at)
      st_fail(file, cat("tensor \"", t.name, "\": data_offsets [", t.begin, ", ", t.end, "] leave bytes [", at, ", ",
                        t.begin, ") of the data area unused"));
    at = t.end;
    prev = &t;
  }
  if (at != data_bytes)
    st_fail(file, cat("the tensors cover ", at, " bytes but the data area is ", data_bytes,
                      " bytes (trailing bytes: truncated header or wrong file?)"));
  return h;
}

// Parses a whole file held in memory (the fuzz target and from_bytes use this).
inline safetensors_header parse_safetensors_bytes(std::span<const std::byte> file_bytes, std::string_view file) {
  const std::uint64_t n =
      parse_safetensors_prefix(file_bytes.first(std::min<std::size_t>(8, file_bytes.size())), file_bytes.size(), file);
  const auto* p = reinterpret_cast<const char*>(file_bytes.data() + 8);
  return parse_safetensors_header(std::string_view(p, n), file_bytes.size() - 8 - n, file);
}

// The rank of a dtype in the reference's Dtype enum: its writer orders tensors by this
// (descending: widest alignment first), then by name.
constexpr int st_dtype_rank(dtype t) {
  switch (t) {
    case dtype::u8: return 1;
    case dtype::i8: return 2;
    case dtype::i16: return 3;
    case dtype::u16: return 4;
    case dtype::f16: return 5;
    case dtype::bf16: return 6;
    case dtype::i32: return 7;
    case dtype::u32: return 8;
    case dtype::f32: return 9;
    case dtype::f64: return 10;
    case dtype::i64: return 11;
    case dtype::u64: return 12;
  }
  return 0;
}

// The header bytes (JSON + space padding to a multiple of 8) for tensors already
// placed at their offsets, in the reference's layout: __metadata__ first, then the
// tensors in data order, each {dtype, shape, data_offsets}, compact.
inline std::string serialize_safetensors_header(const std::vector<tensor_info>& tensors,
                                                const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (auto& [k, v] : metadata) m[k] = v;
    j["__metadata__"] = std::move(m);
  }
  for (const auto& t : tensors) {
    nlohmann::ordered_json e = nlohmann::ordered_json::object();
    e["dtype"] = std::string(name_of(t.dtype));
    e["shape"] = t.shape;
    e["data_offsets"] = {t.begin, t.end};
    j[t.name] = std::move(e);
  }
  std::string s = j.dump();
  s.append((8 - s.size() % 8) % 8, ' ');
  return s;
}

}  // namespace detail
}  // namespace strata
