// A Qwen2 trainer's weights from and to a Hugging Face model directory: each rank reads
// only the elements it holds (tensor slice, pipeline stage, ZeRO shard); the export is a
// directory transformers.AutoModelForCausalLM.from_pretrained loads.
#pragma once
#include <cstddef>
#include <filesystem>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "../core/dtype.hpp"
#include "../core/error.hpp"
#include "../io/export.hpp"
#include "../io/hf_weights.hpp"
#include "../model/layout.hpp"
#include "../model/reflect.hpp"
#include "qwen2.hpp"

namespace strata::detail {

// Checks that the directory's tensors are exactly the model's; the trainer-independent
// half of load_qwen2_weights (compiled once, not once per trainer). A template only so
// that a program that never loads a Qwen2 model does not compile it.
template <class Files>
void check_qwen2_files(const flat_layout& layout, const model_params& m, const Files& files) {
  std::set<std::string> used;
  for (std::size_t i = 0; i < layout.params().size(); ++i) {
    const param_slot& slot = layout.params()[i];
    if (m.local_numel[i] == 0) continue;  // an absent bias (o_proj's): not in the file either
    const std::string name = models::qwen2_hf_name(slot.tied_to.empty() ? slot.name : slot.tied_to);
    // A tied copy saved anyway is read as its source, as transformers does.
    if (!slot.tied_to.empty() && files.contains(models::qwen2_hf_name(slot.name)))
      used.insert(models::qwen2_hf_name(slot.name));
    if (!files.contains(name))
      throw checkpoint_error(cat(files.dir().string(), ": tensor \"", name, "\" (param ", slot.name, ") is missing"));
    used.insert(name);
    const tensor_info& t = files.info(name);
    if (!st_is_float_dtype(t.dtype))
      throw checkpoint_error(
          cat(files.file_of(name), ": tensor \"", name, "\" is ", name_of(t.dtype), ", not a floating type"));
    const shape& want = m.full_shapes[i];
    bool same = t.shape.size() == want.rank;
    for (std::size_t d = 0; same && d < t.shape.size(); ++d) same = t.shape[d] == want[d];
    if (!same) {
      std::string got = "[";
      for (std::size_t d = 0; d < t.shape.size(); ++d) got += (d ? ", " : "") + std::to_string(t.shape[d]);
      throw checkpoint_error(
          cat(files.file_of(name), ": tensor \"", name, "\" has shape ", got, "] but ", slot.name, " is ", want));
    }
  }
  for (const auto& name : files.names())
    if (!used.count(name))
      throw checkpoint_error(cat(files.file_of(name), ": tensor \"", name,
                                 "\" is not a param of this Qwen2 model (another architecture, or another size?)"));
}

template <class Comm>
void export_qwen2_from(Comm& world, weight_pieces walk, const flat_layout& layout, const model_params& m,
                       const std::filesystem::path& dir, const models::qwen2_config& cfg, dtype as,
                       std::uint64_t max_shard_bytes) {
  constexpr std::size_t skipped = static_cast<std::size_t>(-1);
  std::vector<hf_weights_writer::tensor> tensors;
  std::vector<std::size_t> tensor_of;  // per layout param: its tensor in the directory, or skipped
  for (std::size_t i = 0; i < layout.params().size(); ++i) {
    const auto& slot = layout.params()[i];
    // Tied copies and absent biases are not written, as transformers saves the model.
    const bool written = slot.tied_to.empty() && m.full_shapes[i].numel() != 0;
    tensor_of.push_back(written ? tensors.size() : skipped);
    if (written) tensors.push_back({models::qwen2_hf_name(slot.name), m.full_shapes[i]});
  }
  nlohmann::json config = cfg.to_json();
  config["torch_dtype"] = as == dtype::bf16 ? "bfloat16" : "float32";
  struct sink final : weights_sink {
    hf_weights_writer out;
    const std::vector<std::size_t>& tensor_of;
    sink(const std::filesystem::path& dir, const nlohmann::json& config,
         const std::vector<hf_weights_writer::tensor>& tensors, dtype as, std::uint64_t max_shard_bytes,
         const std::vector<std::size_t>& tensor_of)
        : out(dir, config, tensors, as, max_shard_bytes), tensor_of(tensor_of) {}
    void write(std::size_t p, std::size_t first, std::span<const float> values) override {
      if (tensor_of[p] != skipped) out.write(tensor_of[p], first, values);
    }
    void commit() override { out.commit(); }
  };
  stream_weights_to_rank0(world, walk, [&]() -> std::unique_ptr<weights_sink> {
    return std::make_unique<sink>(dir, config, tensors, as, max_shard_bytes, tensor_of);
  });
}

}  // namespace strata::detail

namespace strata::models {

// Checks that the directory's tensors are exactly the model's (transformers' names, full
// shapes, floating dtypes; a tied copy may be absent) and loads them into the trainer,
// BF16, FP16 or FP32 on disk into the fp32 master. Collective over the trainer's grid;
// a missing, unexpected or mis-shaped tensor is a checkpoint_error naming it and its file,
// before any weight changes.
template <class Trainer>
void load_qwen2_weights(Trainer& tr, const hf_weights& files) {
  strata::detail::check_qwen2_files(tr.layout(), strata::detail::params_of(tr.model()), files);
  tr.set_weights_from([&](const param_slot& p, std::size_t first, std::span<float> out) {
    files.read(qwen2_hf_name(p.name), first, out);
  });
}

template <class Trainer>
void load_qwen2_weights(Trainer& tr, const std::filesystem::path& dir) {
  load_qwen2_weights(tr, hf_weights::open(dir));
}

// Writes a Hugging Face directory of the trainer's weights (config.json from cfg, the
// tensors under transformers' names, a tied copy left out as transformers saves it), as
// F32 or BF16, sharded above max_shard_bytes. Collective; world rank 0 writes, streaming
// the weights piece by piece (no rank holds the model).
template <class Trainer>
void export_qwen2(Trainer& tr, const std::filesystem::path& dir, const qwen2_config& cfg, dtype as = dtype::f32,
                  std::uint64_t max_shard_bytes = std::uint64_t{5} << 30) {
  strata::detail::export_qwen2_from(tr.grid_ref().world(), strata::detail::weight_walk_of(tr), tr.layout(),
                                    strata::detail::params_of(tr.model()), dir, cfg, as, max_shard_bytes);
}

}  // namespace strata::models
