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

// Writes dir/config.json and the tensors as F32 or BF16: model.safetensors, or, when they
// exceed max_shard_bytes, model-0000k-of-0000n.safetensors (tensors in order, a new shard
// when the next would pass the size) with model.safetensors.index.json. Everything goes
// to a temporary directory next to dir, fsynced, then renamed into place, so dir is
// either the old directory or the complete new one.
inline void write_hf_weights(const std::filesystem::path& dir, const nlohmann::json& config,
                             std::span<const hf_tensor> tensors, dtype as = dtype::f32,
                             std::uint64_t max_shard_bytes = std::uint64_t{5} << 30) {
  expects<config_error>(as == dtype::f32 || as == dtype::bf16,
                        [&] { return cat(dir.string(), ": weights are written as F32 or BF16, not ", name_of(as)); });
  expects<config_error>(max_shard_bytes > 0, [&] { return cat(dir.string(), ": a shard size of 0 bytes"); });
  const std::uint64_t elem = size_of(as);
  std::vector<std::vector<std::size_t>> shards(1);
  std::uint64_t in_shard = 0, total = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    expects<config_error>(tensors[i].values.size() == tensors[i].shape.numel(), [&] {
      return cat(dir.string(), ": tensor \"", tensors[i].name, "\" of shape ", tensors[i].shape, " given ",
                 tensors[i].values.size(), " values");
    });
    const std::uint64_t bytes = tensors[i].values.size() * elem;
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  const auto parent = dir.has_parent_path() ? dir.parent_path() : std::filesystem::path(".");
  const auto tmp = parent / cat(".", dir.filename().string(), ".tmp");
  std::filesystem::remove_all(tmp);
  std::filesystem::create_directories(tmp);
  const auto shard_name = [&](std::size_t k) {
    if (shards.size() == 1) return std::string("model.safetensors");
    char s[64];
    std::snprintf(s, sizeof s, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    return std::string(s);
  };
  nlohmann::json weight_map = nlohmann::json::object();
  for (std::size_t k = 0; k < shards.size(); ++k) {
    std::vector<std::string> names;
    std::vector<shape> shapes;
    std::vector<float> values;
    for (std::size_t i : shards[k]) {
      names.push_back(tensors[i].name);
      shapes.push_back(tensors[i].shape);
      values.insert(values.end(), tensors[i].values.begin(), tensors[i].values.end());
      weight_map[tensors[i].name] = shard_name(k);
    }
    export_weights(tmp / shard_name(k), names, shapes, values, as);
  }
  if (shards.size() > 1) {
    const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    detail::write_file_atomic(tmp / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  detail::write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
  // The old directory moves aside, the new one takes its name, then the old one goes.
  const auto old = parent / cat(".", dir.filename().string(), ".old");
  std::filesystem::remove_all(old);
  if (std::filesystem::exists(dir)) std::filesystem::rename(dir, old);
  std::filesystem::rename(tmp, dir);
  detail::sync_directory(parent);
  std::filesystem::remove_all(old);
}

}  // namespace strata
