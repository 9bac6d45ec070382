// Consolidated export (and import) of a trainer's weights as safetensors: every param's full tensor
// (tensor-parallel slices assembled, pipeline stages joined) under its dotted name, in
// fp32 or bf16, written by one rank; readable by Hugging Face / the safetensors package.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "../model/reflect.hpp"
#include "safetensors.hpp"

namespace strata {

namespace detail {
template <class Trainer>
void model_names_and_full_shapes(Trainer& tr, std::vector<std::string>& names, std::vector<shape>& shapes) {
  for_each_param(tr.model(), [&](const auto& p, std::string_view name) {
    names.emplace_back(name);
    shapes.push_back(p.sharded() ? p.full_shape : p.shape);
  });
}
}  // namespace detail

// Collective over the trainer's grid; the file is written by world rank 0.
template <class Trainer>
void export_safetensors(Trainer& tr, const std::filesystem::path& path, dtype as = dtype::f32) {
  const std::vector<float> values = tr.gather_master();
  if (tr.grid_ref().world().rank() != 0) return;
  std::vector<std::string> names;
  std::vector<shape> shapes;
  detail::model_names_and_full_shapes(tr, names, shapes);
  export_weights(path, names, shapes, values, as);
}

// Initial weights from a safetensors file (strata's export, or a foreign one through
// name_map: strata's dotted name -> the file's tensor name). Every rank reads the
// tensors and keeps what it holds; a missing tensor or a shape mismatch is a
// checkpoint_error naming both names.
template <class Trainer>
void import_safetensors(Trainer& tr, const std::filesystem::path& path,
                        const std::function<std::string(std::string_view)>& name_map = {}) {
  std::vector<std::string> names;
  std::vector<shape> shapes;
  detail::model_names_and_full_shapes(tr, names, shapes);
  tr.set_weights(import_weights(path, names, shapes, name_map));
}

}  // namespace strata
