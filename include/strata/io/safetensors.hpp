// safetensors files (the Hugging Face weight format): a validating reader with dtype
// conversion and partial reads, an atomic writer, and export / import of a model's weights.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "detail/atomic_file.hpp"
#include "detail/safetensors_header.hpp"
#include "safetensors_info.hpp"

namespace strata {

namespace detail {

template <class T>
inline constexpr bool st_is_float =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

constexpr bool st_is_float_dtype(dtype t) {
  return t == dtype::f32 || t == dtype::f64 || t == dtype::bf16 || t == dtype::f16;
}

// Calls f(type_tag-like pointer) with the C++ type of a floating dtype.
template <class F>
void st_with_float_type(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f(static_cast<float*>(nullptr));
    case dtype::f64: return f(static_cast<double*>(nullptr));
    case dtype::bf16: return f(static_cast<bf16*>(nullptr));
    case dtype::f16: return f(static_cast<fp16*>(nullptr));
    default: return;
  }
}

template <class Dst, class Src>
Dst st_convert(Src s) {
  if constexpr (std::is_same_v<Dst, bf16> || std::is_same_v<Dst, fp16>)
    return Dst(static_cast<float>(s));
  else if constexpr (std::is_same_v<Src, double>)
    return static_cast<Dst>(s);
  else
    return static_cast<Dst>(static_cast<float>(s));
}

}  // namespace detail

// A safetensors file opened for reading. open() reads and validates the header only;
// tensors are read on demand, whole or in element ranges (so a rank reads only the part
// it needs), into a caller's span. Every failure is a checkpoint_error naming the file.
class safetensors_file {
 public:
  static safetensors_file open(const std::filesystem::path& path) {
    safetensors_file f;
    f.file_ = detail::read_file(path);
    f.name_ = f.file_.path();
    std::byte prefix[8]{};
    if (f.file_.size() >= 8) f.file_.read_at(0, prefix);
    const std::uint64_t n = detail::parse_safetensors_prefix(
        std::span<const std::byte>(prefix, f.file_.size() >= 8 ? 8 : 0), f.file_.size(), f.name_);
    std::string text(n, '\0');
    f.file_.read_at(8, std::as_writable_bytes(std::span<char>(text)));
    f.header_ = detail::parse_safetensors_header(text, f.file_.size() - 8 - n, f.name_);
    f.index();
    return f;
  }

  // A file held in memory; `name` stands for the path in messages.
  static safetensors_file from_bytes(std::vector<std::byte> bytes, std::string name = "<memory>") {
    safetensors_file f;
    f.name_ = std::move(name);
    f.mem_ = std::move(bytes);
    f.in_memory_ = true;
    f.header_ = detail::parse_safetensors_bytes(f.mem_, f.name_);
    f.index();
    return f;
  }

  const std::string& path() const noexcept { return name_; }
  const safetensors_header& header() const noexcept { return header_; }
  const std::map<std::string, std::string>& metadata() const noexcept { return header_.metadata; }
  // Byte offset of the data area in the file (8 + header length).
  std::uint64_t data_offset() const noexcept { return 8 + header_.header_bytes; }

  // Tensor names in data (offset) order.
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    v.reserve(header_.tensors.size());
    for (auto& t : header_.tensors) v.push_back(t.name);
    return v;
  }
  std::size_t size() const noexcept { return header_.tensors.size(); }
  bool contains(std::string_view name) const { return by_name_.find(name) != by_name_.end(); }

  const tensor_info& info(std::string_view name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) detail::st_fail(name_, strata::cat("no tensor \"", name, "\""));
    return header_.tensors[it->second];
  }

  // Raw bytes of a tensor from byte `offset` within it.
  void read_bytes(std::string_view name, std::span<std::byte> out, std::uint64_t offset = 0) const {
    const tensor_info& t = info(name);
    if (offset > t.bytes() || out.size() > t.bytes() - offset)
      detail::st_fail(name_, strata::cat("tensor \"", name, "\": reading bytes [", offset, ", ", offset + out.size(),
                                         ") of a ", t.bytes(), "-byte tensor"));
    raw(data_offset() + t.begin + offset, out);
  }

  // Elements [first, first + out.size()) of the tensor, as T. Floating dtypes (F64,
  // F32, BF16, F16) convert to any floating T (to bf16 / fp16 with round-to-nearest-even);
  // integer dtypes must match T exactly.
  template <class T>
  void read(std::string_view name, std::span<T> out, std::uint64_t first = 0) const {
    const tensor_info& t = info(name);
    const std::uint64_t n = t.numel();
    if (first > n || out.size() > n - first)
      detail::st_fail(
          name_, strata::cat("tensor \"", name, "\": reading elements [", first, ", ", first + out.size(), ") of ", n));
    if (t.dtype == dtype_v<T>) {
      raw(data_offset() + t.begin + first * sizeof(T), std::as_writable_bytes(out));
      return;
    }
    if constexpr (detail::st_is_float<T>) {
      if (detail::st_is_float_dtype(t.dtype)) {
        detail::st_with_float_type(t.dtype, [&]<class S>(S*) { convert<S>(t, out, first); });
        return;
      }
    }
    detail::st_fail(name_, strata::cat("tensor \"", name, "\": dtype ", name_of(t.dtype), " cannot be read as ",
                                       name_of(dtype_v<T>),
                                       " (floating types convert among themselves; integer types "
                                       "must match)"));
  }

  // The whole tensor; `out` must hold exactly its elements.
  template <class T>
  void read_all(std::string_view name, std::span<T> out) const {
    const tensor_info& t = info(name);
    if (out.size() != t.numel())
      detail::st_fail(name_,
                      strata::cat("tensor \"", name, "\": has ", t.numel(), " elements, the destination ", out.size()));
    read(name, out);
  }

  template <class T>
  std::vector<T> read_all(std::string_view name) const {
    std::vector<T> v(static_cast<std::size_t>(info(name).numel()));
    read(name, std::span<T>(v));
    return v;
  }

 private:
  safetensors_file() = default;

  void index() {
    for (std::size_t i = 0; i < header_.tensors.size(); ++i) by_name_.emplace(header_.tensors[i].name, i);
  }

  void raw(std::uint64_t offset, std::span<std::byte> out) const {
    if (!in_memory_) return file_.read_at(offset, out);
    // Validation guarantees tensors lie inside the buffer; this guards direct callers.
    if (offset > mem_.size() || out.size() > mem_.size() - offset)
      detail::st_fail(name_, strata::cat("read of bytes [", offset, ", ", offset + out.size(), ") beyond the end"));
    if (!out.empty()) std::memcpy(out.data(), mem_.data() + offset, out.size());
  }

  // Converts in chunks so a large tensor needs no second full-size buffer.
  template <class S, class T>
  void convert(const tensor_info& t, std::span<T> out, std::uint64_t first) const {
    constexpr std::size_t chunk = 1 << 14;
    std::vector<S> buf(std::min<std::size_t>(chunk, out.size()));
    for (std::size_t done = 0; done < out.size(); done += buf.size()) {
      const std::size_t k = std::min(buf.size(), out.size() - done);
      raw(data_offset() + t.begin + (first + done) * sizeof(S), std::as_writable_bytes(std::span<S>(buf.data(), k)));
      for (std::size_t i = 0; i < k; ++i) out[done + i] = detail::st_convert<T>(buf[i]);
    }
  }

  std::string name_;
  detail::read_file file_;
  std::vector<std::byte> mem_;
  bool in_memory_ = false;
  safetensors_header header_;
  std::map<std::string, std::size_t, std::less<>> by_name_;
};

// The order of tensors' bytes in a file. sorted: the reference writer's order (dtype width
// descending, then name), so the same tensors give the same bytes as Python's
// safetensors; as_added: the order given.
enum class safetensors_order { sorted, as_added };

namespace detail {

// A tensor as a writer takes it: a name that is not the metadata's and is new in `names`,
// extents >= 0, and a byte count that fits 64 bits.
inline tensor_info st_checked_info(std::string name, dtype t, std::vector<std::int64_t> shape,
                                   std::set<std::string>& names) {
  const std::string where = strata::cat("safetensors writer: tensor \"", name, "\": ");
  if (name == "__metadata__") throw checkpoint_error(where + "the name is reserved for the metadata");
  if (!names.insert(name).second) throw checkpoint_error(where + "added twice");
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw checkpoint_error(strata::cat(where, "negative extent ", d));
    if (d != 0 && n > UINT64_MAX / static_cast<std::uint64_t>(d))
      throw checkpoint_error(where + "element count overflows");
    n *= static_cast<std::uint64_t>(d);
  }
  if (n != 0 && n > UINT64_MAX / size_of(t)) throw checkpoint_error(where + "byte count overflows");
  tensor_info info;
  info.name = std::move(name);
  info.dtype = t;
  info.shape = std::move(shape);
  return info;
}

// The file order of tensors (indices into `infos`) and, in it, each one's data range.
inline std::vector<std::size_t> st_place(std::vector<tensor_info>& infos, safetensors_order o) {
  std::vector<std::size_t> seq(infos.size());
  for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = i;
  if (o == safetensors_order::sorted)
    std::stable_sort(seq.begin(), seq.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = infos[a];
      const auto& y = infos[b];
      const int rx = st_dtype_rank(x.dtype), ry = st_dtype_rank(y.dtype);
      return rx != ry ? rx > ry : x.name < y.name;
    });
  std::uint64_t at = 0;
  for (auto i : seq) {
    infos[i].begin = at;
    infos[i].end = at += infos[i].numel() * size_of(infos[i].dtype);
  }
  return seq;
}

// The 8-byte little-endian length before a safetensors header.
inline std::array<unsigned char, 8> st_prefix(std::uint64_t n) {
  std::array<unsigned char, 8> b{};
  for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<unsigned char>(n >> (8 * i));
  return b;
}

// The header of tensors placed by st_place, in file order.
inline std::string st_header(const std::vector<tensor_info>& infos, const std::vector<std::size_t>& seq,
                             const std::map<std::string, std::string>& metadata) {
  std::vector<tensor_info> in_order;
  for (auto i : seq) in_order.push_back(infos[i]);
  return serialize_safetensors_header(in_order, metadata);
}

}  // namespace detail

// A safetensors file written piece by piece, so that a writer need not hold its tensors
// (a model streamed from its shards): the header first, from the tensors' names, dtypes
// and shapes; then each tensor's bytes at their place, in any order; commit() checks that
// every byte came and makes the file `path` at once (see detail::staged_file).
class safetensors_stream {
 public:
  // tensors: name, dtype and shape of each (begin and end are placed here).
  safetensors_stream(const std::filesystem::path& path, std::vector<tensor_info> tensors,
                     const std::map<std::string, std::string>& metadata = {},
                     safetensors_order o = safetensors_order::sorted)
      : file_(path), path_(path.string()) {
    std::set<std::string> names;
    for (auto& t : tensors) infos_.push_back(detail::st_checked_info(t.name, t.dtype, t.shape, names));
    const auto seq = detail::st_place(infos_, o);
    const std::string head = detail::st_header(infos_, seq, metadata);
    const auto len = detail::st_prefix(head.size());
    file_.sink().write(std::as_bytes(std::span(len)));
    file_.sink().write(std::as_bytes(std::span(head)));
    data_start_ = 8 + head.size();
    written_.assign(infos_.size(), 0);
  }

  std::size_t size() const noexcept { return infos_.size(); }
  const tensor_info& info(std::size_t tensor) const { return infos_.at(tensor); }

  // Bytes of tensor `tensor` from byte `offset` of its data.
  void write(std::size_t tensor, std::uint64_t offset, std::span<const std::byte> bytes) {
    const tensor_info& t = infos_.at(tensor);
    if (offset > t.bytes() || bytes.size() > t.bytes() - offset)
      throw checkpoint_error(strata::cat(path_, ": tensor \"", t.name, "\" has ", t.bytes(), " bytes; given ",
                                         bytes.size(), " at byte ", offset));
    file_.sink().write_at(data_start_ + t.begin + offset, bytes);
    written_[tensor] += bytes.size();
  }

  void commit() {
    for (std::size_t i = 0; i < infos_.size(); ++i)
      if (written_[i] != infos_[i].bytes())
        throw checkpoint_error(strata::cat(path_, ": tensor \"", infos_[i].name, "\" got ", written_[i], " of its ",
                                           infos_[i].bytes(), " bytes"));
    file_.commit();
  }

 private:
  detail::staged_file file_;
  std::string path_;
  std::vector<tensor_info> infos_;
  std::uint64_t data_start_ = 0;
  std::vector<std::uint64_t> written_;
};

// Collects tensors and metadata, then writes a safetensors file atomically. add() keeps
// a view of the caller's bytes (no copy): they must stay alive until write().
class safetensors_writer {
 public:
  using order = safetensors_order;

  std::map<std::string, std::string> metadata;

  void add(std::string name, dtype t, std::vector<std::int64_t> shape, std::span<const std::byte> bytes) {
    entries_.push_back({check(std::move(name), t, std::move(shape), bytes.size()), bytes, {}});
  }
  template <class T>
  void add(std::string name, std::vector<std::int64_t> shape, std::span<const T> values) {
    add(std::move(name), dtype_v<T>, std::move(shape), std::as_bytes(values));
  }
  // Takes ownership of the bytes (for data converted on the way out).
  void add_owned(std::string name, dtype t, std::vector<std::int64_t> shape, std::vector<std::byte> bytes) {
    tensor_info info = check(std::move(name), t, std::move(shape), bytes.size());
    entries_.push_back({std::move(info), {}, std::move(bytes)});
  }

  std::size_t size() const noexcept { return entries_.size(); }

  void write(const std::filesystem::path& path, order o = order::sorted) const {
    safetensors_stream out(path, infos(), metadata, o);
    for (std::size_t i = 0; i < entries_.size(); ++i) out.write(i, 0, entries_[i].data());
    out.commit();
  }

  // The whole file in memory.
  std::vector<std::byte> to_bytes(order o = order::sorted) const {
    auto placed = infos();
    const auto seq = detail::st_place(placed, o);
    const std::string head = detail::st_header(placed, seq, metadata);
    const auto len = detail::st_prefix(head.size());
    std::uint64_t data = 0;
    for (const auto& t : placed) data = std::max(data, t.end);
    std::vector<std::byte> out(8 + head.size() + data);
    std::memcpy(out.data(), len.data(), 8);
    std::memcpy(out.data() + 8, head.data(), head.size());
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const auto d = entries_[i].data();
      if (!d.empty()) std::memcpy(out.data() + 8 + head.size() + placed[i].begin, d.data(), d.size());
    }
    return out;
  }

 private:
  struct entry {
    tensor_info info;
    std::span<const std::byte> view;
    std::vector<std::byte> owned;
    std::span<const std::byte> data() const { return owned.empty() ? view : std::span<const std::byte>(owned); }
  };

  tensor_info check(std::string name, dtype t, std::vector<std::int64_t> shape, std::size_t bytes) {
    tensor_info info = detail::st_checked_info(std::move(name), t, std::move(shape), names_);
    if (info.numel() * size_of(t) != bytes)
      throw checkpoint_error(strata::cat("safetensors writer: tensor \"", info.name, "\": ", info.numel(),
                                         " elements of ", name_of(t), " are ", info.numel() * size_of(t),
                                         " bytes, given ", bytes));
    return info;
  }

  std::vector<tensor_info> infos() const {
    std::vector<tensor_info> v;
    for (const auto& e : entries_) v.push_back(e.info);
    return v;
  }

  std::vector<entry> entries_;
  std::set<std::string> names_;
};

namespace detail {

// fp32 values as the bytes of F32 (the values themselves, no copy), or of BF16 (round to
// nearest even, into `scratch`).
inline std::span<const std::byte> st_float_bytes(std::span<const float> values, dtype as,
                                                 std::vector<std::byte>& scratch) {
  if (as == dtype::f32) return std::as_bytes(values);
  scratch.resize(values.size() * sizeof(bf16));
  for (std::size_t k = 0; k < values.size(); ++k) {
    const bf16 h(values[k]);
    std::memcpy(scratch.data() + k * sizeof(bf16), &h, sizeof(bf16));
  }
  return scratch;
}

// The tensors of a model's weights file: names[i] of shapes[i] as F32 or BF16.
inline std::vector<tensor_info> st_weight_infos(const std::string& file, std::span<const std::string> names,
                                                std::span<const shape> shapes, dtype as) {
  if (as != dtype::f32 && as != dtype::bf16)
    throw checkpoint_error(strata::cat(file, ": weights are written as F32 or BF16, not ", name_of(as)));
  if (names.size() != shapes.size())
    throw checkpoint_error(strata::cat(file, ": ", names.size(), " names but ", shapes.size(), " shapes"));
  std::vector<tensor_info> infos(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    infos[i].name = names[i];
    infos[i].dtype = as;
    infos[i].shape.assign(shapes[i].dims.begin(), shapes[i].dims.begin() + static_cast<long>(shapes[i].rank));
  }
  return infos;
}

}  // namespace detail

// Writes a model's consolidated weights: `values` holds the params in order, each
// names[i] of shapes[i], as F32 or BF16 (round to nearest even). The metadata gets
// "format": "pt" unless given, as Hugging Face transformers expects of a checkpoint.
inline void export_weights(const std::filesystem::path& path, std::span<const std::string> names,
                           std::span<const shape> shapes, std::span<const float> values, dtype as = dtype::f32,
                           std::map<std::string, std::string> metadata = {}) {
  const std::string file = path.string();
  auto infos = detail::st_weight_infos(file, names, shapes, as);
  std::size_t total = 0;
  for (auto& s : shapes) total += s.numel();
  if (total != values.size())
    throw checkpoint_error(
        strata::cat(file, ": export_weights: the shapes hold ", total, " values, given ", values.size()));
  metadata.emplace("format", "pt");
  safetensors_stream out(path, std::move(infos), metadata);
  std::vector<std::byte> bytes;
  std::size_t at = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::size_t n = shapes[i].numel();
    out.write(i, 0, detail::st_float_bytes(values.subspan(at, n), as, bytes));
    at += n;
  }
  out.commit();
}

// Reads initial weights for params names[i] of shapes[i], concatenated in that order
// (as float, from F32 / BF16 / F16 / F64). name_map turns a param's name into the
// tensor name in the file (identity when empty), e.g. "blocks.0.fc1.weight" ->
// "model.layers.0.mlp.up_proj.weight"; tensors no param asks for are ignored. A missing
// tensor or a shape mismatch is a checkpoint_error naming both names.
inline std::vector<float> import_weights(const std::filesystem::path& path, std::span<const std::string> names,
                                         std::span<const shape> shapes,
                                         const std::function<std::string(std::string_view)>& name_map = {}) {
  const safetensors_file f = safetensors_file::open(path);
  if (names.size() != shapes.size())
    throw checkpoint_error(
        strata::cat(f.path(), ": import_weights got ", names.size(), " names but ", shapes.size(), " shapes"));
  std::size_t total = 0;
  for (auto& s : shapes) total += s.numel();
  std::vector<float> out(total);
  std::size_t at = 0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const std::string key = name_map ? name_map(names[i]) : names[i];
    const std::string what = key == names[i] ? strata::cat("tensor \"", key, "\"")
                                             : strata::cat("tensor \"", key, "\" (param \"", names[i], "\")");
    if (!f.contains(key)) throw checkpoint_error(strata::cat(f.path(), ": ", what, " is missing"));
    const tensor_info& t = f.info(key);
    bool same = t.shape.size() == shapes[i].rank;
    for (std::size_t d = 0; same && d < t.shape.size(); ++d) same = t.shape[d] == shapes[i][d];
    if (!same) {
      std::string fs = "[";
      for (std::size_t d = 0; d < t.shape.size(); ++d) fs += (d ? ", " : "") + std::to_string(t.shape[d]);
      throw checkpoint_error(
          strata::cat(f.path(), ": ", what, " has shape ", fs, "] but the param expects ", shapes[i].str()));
    }
    if (!detail::st_is_float_dtype(t.dtype))
      throw checkpoint_error(strata::cat(f.path(), ": ", what, " is ", name_of(t.dtype), ", not a floating type"));
    const std::size_t n = shapes[i].numel();
    f.read(key, std::span<float>(out.data() + at, n));
    at += n;
  }
  return out;
}

}  // namespace strata
