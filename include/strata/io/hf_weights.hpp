// The weights of a Hugging Face model directory: model.safetensors, or the shards that
// model.safetensors.index.json lists, read by tensor name in element ranges; and a
// directory written the same way (sharded above a size, with its index), atomically.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "detail/files.hpp"
#include "safetensors.hpp"

namespace strata {

class hf_weights {
 public:
  // Opens every file's header (tensors are read on demand). A directory without weights,
  // an index that does not parse, a shard it lists that is missing or truncated, or a
  // tensor the index places in a file that lacks it, is a checkpoint_error naming the file.
  static hf_weights open(const std::filesystem::path& dir) {
    hf_weights w;
    w.dir_ = dir;
    const auto single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (std::filesystem::exists(index)) {
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(detail::read_text_file(index));
      } catch (const nlohmann::json::exception& e) {
        throw checkpoint_error(cat(index.string(), ": not valid JSON: ", e.what()));
      }
      const auto map = j.find("weight_map");
      if (map == j.end() || !map->is_object())
        throw checkpoint_error(cat(index.string(), ": has no \"weight_map\" object"));
      std::map<std::string, std::size_t> file_index;
      for (const auto& [name, file] : map->items()) {
        if (!file.is_string())
          throw checkpoint_error(cat(index.string(), ": weight_map[\"", name, "\"] is not a file name"));
        const std::string f = file.get<std::string>();
        if (f.find('/') != std::string::npos || f == "." || f == "..")
          throw checkpoint_error(
              cat(index.string(), ": weight_map[\"", name, "\"] = \"", f, "\" is not a file of the directory"));
        auto [it, fresh] = file_index.emplace(f, w.files_.size());
        if (fresh) {
          const auto path = dir / f;
          if (!std::filesystem::exists(path))
            throw checkpoint_error(
                cat(path.string(), ": listed in ", index.string(), " (for \"", name, "\") but missing"));
          w.files_.push_back(safetensors_file::open(path));
        }
        const safetensors_file& sf = w.files_[it->second];
        if (!sf.contains(name))
          throw checkpoint_error(
              cat(sf.path(), ": has no tensor \"", name, "\", which ", index.string(), " places there"));
        w.where_.emplace(name, it->second);
      }
    } else if (std::filesystem::exists(single)) {
      w.files_.push_back(safetensors_file::open(single));
      for (const auto& name : w.files_[0].names()) w.where_.emplace(name, 0);
    } else {
      throw checkpoint_error(cat(dir.string(), ": no model.safetensors and no model.safetensors.index.json"));
    }
    return w;
  }

  const std::filesystem::path& dir() const noexcept { return dir_; }
  // Tensor names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> v;
    for (const auto& [name, file] : where_) v.push_back(name);
    return v;
  }
  bool contains(std::string_view name) const { return where_.find(name) != where_.end(); }
  const tensor_info& info(std::string_view name) const { return file(name).info(name); }
  // The file that holds a tensor, for messages.
  const std::string& file_of(std::string_view name) const { return file(name).path(); }

  // Elements [first, first + out.size()) of a floating tensor, as float.
  void read(std::string_view name, std::uint64_t first, std::span<float> out) const {
    file(name).read(name, out, first);
  }

 private:
  const safetensors_file& file(std::string_view name) const {
    const auto it = where_.find(name);
    if (it == where_.end()) throw checkpoint_error(cat(dir_.string(), ": no tensor \"", name, "\""));
    return files_[it->second];
  }

  std::filesystem::path dir_;
  std::vector<safetensors_file> files_;
  std::map<std::string, std::size_t, std::less<>> where_;
};

// One tensor to write: its name, shape and values (fp32, rounded when written as BF16).
struct hf_tensor {
  std::string name;
  strata::shape shape;
  std::span<const float> values;
};

// A Hugging Face directory written tensor piece by tensor piece, so that the writer need
// not hold the model: dir/config.json and the tensors as F32 or BF16 in model.safetensors,
// or, when they exceed max_shard_bytes, model-0000k-of-0000n.safetensors (tensors in the
// order given, a new shard when the next would pass the size) with
// model.safetensors.index.json. Everything goes to a temporary directory next to dir;
// commit() checks every tensor is complete and renames it into place, so dir is either
// the old directory or the complete new one.
class hf_weights_writer {
 public:
  struct tensor {
    std::string name;
    strata::shape shape;
  };

  hf_weights_writer(const std::filesystem::path& dir, nlohmann::json config, std::vector<tensor> tensors,
                    dtype as = dtype::f32, std::uint64_t max_shard_bytes = std::uint64_t{5} << 30)
      : dir_(dir), config_(std::move(config)), as_(as) {
    expects<config_error>(as == dtype::f32 || as == dtype::bf16,
                          [&] { return cat(dir.string(), ": weights are written as F32 or BF16, not ", name_of(as)); });
    expects<config_error>(max_shard_bytes > 0, [&] { return cat(dir.string(), ": a shard size of 0 bytes"); });
    std::vector<std::vector<std::size_t>> shards(1);
    std::uint64_t in_shard = 0;
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const std::uint64_t bytes = tensors[i].shape.numel() * size_of(as);
      if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
        shards.emplace_back();
        in_shard = 0;
      }
      shards.back().push_back(i);
      in_shard += bytes;
      total_ += bytes;
    }
    const auto parent = dir.has_parent_path() ? dir.parent_path() : std::filesystem::path(".");
    tmp_ = parent / cat(".", dir.filename().string(), ".tmp");
    std::filesystem::remove_all(tmp_);
    std::filesystem::create_directories(tmp_);
    where_.resize(tensors.size());
    for (std::size_t k = 0; k < shards.size(); ++k) {
      const std::string file = shard_name(k, shards.size());
      std::vector<std::string> names;
      std::vector<shape> shapes;
      for (std::size_t j = 0; j < shards[k].size(); ++j) {
        const std::size_t i = shards[k][j];
        names.push_back(tensors[i].name);
        shapes.push_back(tensors[i].shape);
        where_[i] = {k, j};
        weight_map_[tensors[i].name] = file;
      }
      files_.push_back(std::make_unique<safetensors_stream>(
          tmp_ / file, detail::st_weight_infos((tmp_ / file).string(), names, shapes, as), meta()));
    }
  }
  hf_weights_writer(const hf_weights_writer&) = delete;
  hf_weights_writer& operator=(const hf_weights_writer&) = delete;
  // Not committed: the temporary directory goes, dir stays as it was.
  ~hf_weights_writer() {
    files_.clear();
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove_all(tmp_, ec);
    }
  }

  // Elements [first, first + values.size()) of tensor i, in any order.
  void write(std::size_t i, std::size_t first, std::span<const float> values) {
    const auto [file, index] = where_.at(i);
    files_[file]->write(index, first * size_of(as_), detail::st_float_bytes(values, as_, bytes_));
  }

  void commit() {
    for (auto& f : files_) f->commit();
    if (files_.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total_}}}, {"weight_map", weight_map_}};
      detail::write_file_atomic(tmp_ / "model.safetensors.index.json", index.dump(2) + "\n");
    }
    detail::write_file_atomic(tmp_ / "config.json", config_.dump(2) + "\n");
    // The old directory moves aside, the new one takes its name, then the old one goes.
    const auto parent = tmp_.parent_path();
    const auto old = parent / cat(".", dir_.filename().string(), ".old");
    std::filesystem::remove_all(old);
    if (std::filesystem::exists(dir_)) std::filesystem::rename(dir_, old);
    std::filesystem::rename(tmp_, dir_);
    committed_ = true;
    detail::sync_directory(parent);
    std::filesystem::remove_all(old);
  }

 private:
  static std::string shard_name(std::size_t k, std::size_t shards) {
    if (shards == 1) return "model.safetensors";
    char s[64];
    std::snprintf(s, sizeof s, "model-%05zu-of-%05zu.safetensors", k + 1, shards);
    return s;
  }
  static std::map<std::string, std::string> meta() { return {{"format", "pt"}}; }

  std::filesystem::path dir_, tmp_;
  nlohmann::json config_;
  dtype as_;
  std::uint64_t total_ = 0;
  std::vector<std::unique_ptr<safetensors_stream>> files_;
  std::vector<std::pair<std::size_t, std::size_t>> where_;  // per tensor: its file, its index there
  nlohmann::json weight_map_ = nlohmann::json::object();
  std::vector<std::byte> bytes_;
  bool committed_ = false;
};

// The same directory from tensors in memory (see hf_weights_writer).
inline void write_hf_weights(const std::filesystem::path& dir, const nlohmann::json& config,
                             std::span<const hf_tensor> tensors, dtype as = dtype::f32,
                             std::uint64_t max_shard_bytes = std::uint64_t{5} << 30) {
  std::vector<hf_weights_writer::tensor> shapes;
  for (const auto& t : tensors) {
    expects<config_error>(t.values.size() == t.shape.numel(), [&] {
      return cat(dir.string(), ": tensor \"", t.name, "\" of shape ", t.shape, " given ", t.values.size(), " values");
    });
    shapes.push_back({t.name, t.shape});
  }
  hf_weights_writer out(dir, config, std::move(shapes), as, max_shard_bytes);
  for (std::size_t i = 0; i < tensors.size(); ++i) out.write(i, 0, tensors[i].values);
  out.commit();
}

}  // namespace strata
