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
#include "../core/function_ref.hpp"
#include "../core/trace.hpp"
#include "../model/reflect.hpp"
#include "../model/weight_piece.hpp"
#include "safetensors.hpp"

namespace strata {

namespace detail {
// Every param's dotted name, full shape (a tensor-parallel slice's whole tensor) and
// local element count, in parameter order. Templated on the model only: one walk per
// model, whatever trainers a program builds over it.
struct model_params {
  std::vector<std::string> names;
  std::vector<shape> full_shapes;
  std::vector<std::size_t> local_numel;
};
template <class Model>
model_params params_of(Model& model) {
  model_params m;
  for_each_param(model, [&](const auto& p, std::string_view name) {
    m.names.emplace_back(name);
    m.full_shapes.push_back(p.sharded() ? p.full_shape : p.shape);
    m.local_numel.push_back(p.numel());
  });
  return m;
}

// What a streamed export writes into: made on world rank 0 only.
class weights_sink {
 public:
  virtual ~weights_sink() = default;
  virtual void write(std::size_t param, std::size_t first, std::span<const float> values) = 0;
  virtual void commit() = 0;
};

// Streams the weights (walk: trainer::for_each_weight_piece) to a sink on world rank 0,
// piece by piece (at most one piece beyond the trainer's state on any rank). Collective
// over world. An error on rank 0 (a full disk) is held until every rank is through the
// walk, then thrown there, and every other rank throws too: none waits in a collective
// that rank 0 has left. Compiled once per communicator type, not once per trainer.
template <class Comm>
void stream_weights_to_rank0(Comm& world, weight_pieces walk, function_ref<std::unique_ptr<weights_sink>()> open) {
  const bool writes = world.rank() == 0;
  std::exception_ptr failed;
  const auto guarded = [&](auto&& f) {
    if (failed) return;
    try {
      f();
    } catch (...) {
      failed = std::current_exception();
    }
  };
  std::unique_ptr<weights_sink> out;
  if (writes) guarded([&] { out = open(); });
  walk([&](std::size_t i, std::size_t first, std::span<const float> values) {
    if (out) guarded([&] { out->write(i, first, values); });
  });
  if (out) guarded([&] { out->commit(); });
  std::int32_t rank0_failed = failed ? 1 : 0;
  world.broadcast(std::span<std::int32_t>(&rank0_failed, 1), 0);
  if (failed) std::rethrow_exception(failed);
  expects<checkpoint_error>(rank0_failed == 0,
                            "the weights were not written: world rank 0 failed (its error says why)");
}

// A trainer's weight walk, as stream_weights_to_rank0 takes it.
template <class Trainer>
auto weight_walk_of(Trainer& tr) {
  return [&tr](weight_piece_fn f) { tr.for_each_weight_piece(f); };
}

template <class Comm>
void export_safetensors_from(Comm& world, weight_pieces walk, const model_params& m, const std::filesystem::path& path,
                             dtype as) {
  trace_scope ev(trace_track::checkpoint, [&] { return cat("export ", path.string()); });
  struct sink final : weights_sink {
    safetensors_stream out;
    dtype as;
    std::vector<std::byte> bytes;
    sink(const std::filesystem::path& path, const model_params& m, dtype as)
        : out(path, st_weight_infos(path.string(), m.names, m.full_shapes, as),
              std::map<std::string, std::string>{{"format", "pt"}}),
          as(as) {}
    void write(std::size_t i, std::size_t first, std::span<const float> values) override {
      out.write(i, first * size_of(as), st_float_bytes(values, as, bytes));
    }
    void commit() override { out.commit(); }
  };
  stream_weights_to_rank0(world, walk,
                          [&]() -> std::unique_ptr<weights_sink> { return std::make_unique<sink>(path, m, as); });
}

}  // namespace detail

// Collective over the trainer's grid; the file is written by world rank 0, which never
// holds more than one piece of the model (see detail::stream_weights_to_rank0).
template <class Trainer>
void export_safetensors(Trainer& tr, const std::filesystem::path& path, dtype as = dtype::f32) {
  detail::export_safetensors_from(tr.grid_ref().world(), detail::weight_walk_of(tr), detail::params_of(tr.model()),
                                  path, as);
}

// Initial weights from a safetensors file (strata's export, or a foreign one through
// name_map: strata's dotted name -> the file's tensor name). Every rank reads the
// tensors and keeps what it holds; a missing tensor or a shape mismatch is a
// checkpoint_error naming both names.
template <class Trainer>
void import_safetensors(Trainer& tr, const std::filesystem::path& path,
                        const std::function<std::string(std::string_view)>& name_map = {}) {
  const detail::model_params m = detail::params_of(tr.model());
  tr.set_weights(import_weights(path, m.names, m.full_shapes, name_map));
}

}  // namespace strata
