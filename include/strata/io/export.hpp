// Consolidated export (and import) of a trainer's weights as safetensors: every param's full tensor
// (tensor-parallel slices assembled, pipeline stages joined) under its dotted name, in
// fp32 or bf16, written by one rank; readable by Hugging Face / the safetensors package.
#pragma once
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../core/error.hpp"
#include "../core/trace.hpp"
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
// Streams a trainer's weights to a writer on world rank 0, piece by piece (at most one
// piece beyond the trainer's state on any rank; trainer::for_each_weight_piece). open()
// makes the writer (a std::unique_ptr), piece(writer, param index, first element, values)
// writes, writer->commit() finishes. Collective over the trainer's grid. An error on rank
// 0 (a full disk) is held until every rank is through the walk, then thrown there, and
// every other rank throws too: none waits in a collective that rank 0 has left.
template <class Trainer, class Open, class Piece>
void stream_weights_to_rank0(Trainer& tr, Open&& open, Piece&& piece) {
  const bool writes = tr.grid_ref().world().rank() == 0;
  std::exception_ptr failed;
  const auto guarded = [&](auto&& f) {
    if (failed) return;
    try {
      f();
    } catch (...) {
      failed = std::current_exception();
    }
  };
  decltype(open()) out;
  if (writes) guarded([&] { out = open(); });
  tr.for_each_weight_piece([&](std::size_t i, std::size_t first, std::span<const float> values) {
    if (out) guarded([&] { piece(*out, i, first, values); });
  });
  if (out) guarded([&] { out->commit(); });
  std::int32_t rank0_failed = failed ? 1 : 0;
  tr.grid_ref().world().broadcast(std::span<std::int32_t>(&rank0_failed, 1), 0);
  if (failed) std::rethrow_exception(failed);
  expects<checkpoint_error>(rank0_failed == 0,
                            "the weights were not written: world rank 0 failed (its error says why)");
}

}  // namespace detail

// Collective over the trainer's grid; the file is written by world rank 0, which never
// holds more than one piece of the model (see detail::stream_weights_to_rank0).
template <class Trainer>
void export_safetensors(Trainer& tr, const std::filesystem::path& path, dtype as = dtype::f32) {
  trace_scope ev(trace_track::checkpoint, [&] { return cat("export ", path.string()); });
  std::vector<std::string> names;
  std::vector<shape> shapes;
  detail::model_names_and_full_shapes(tr, names, shapes);
  std::vector<std::byte> bytes;
  detail::stream_weights_to_rank0(
      tr,
      [&] {
        return std::make_unique<safetensors_stream>(path, detail::st_weight_infos(path.string(), names, shapes, as),
                                                    std::map<std::string, std::string>{{"format", "pt"}});
      },
      [&](safetensors_stream& out, std::size_t i, std::size_t first, std::span<const float> values) {
        out.write(i, first * size_of(as), detail::st_float_bytes(values, as, bytes));
      });
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
