// Consolidated export of a trainer's weights to safetensors: every param's full tensor
// (tensor-parallel slices assembled, pipeline stages joined) under its dotted name, in
// fp32 or bf16, written by one rank; readable by Hugging Face / the safetensors package.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include "../model/reflect.hpp"
#include "safetensors.hpp"

namespace strata {

// Collective over the trainer's grid; the file is written by world rank 0.
template <class Trainer>
void export_safetensors(Trainer& tr, const std::filesystem::path& path, dtype as = dtype::f32) {
  const std::vector<float> values = tr.gather_master();
  if (tr.grid_ref().world().rank() != 0) return;
  std::vector<std::string> names;
  std::vector<shape> shapes;
  for_each_param(tr.model(), [&](const auto& p, std::string_view name) {
    names.emplace_back(name);
    shapes.push_back(p.sharded() ? p.full_shape : p.shape);
  });
  export_weights(path, names, shapes, values, as);
}

}  // namespace strata
