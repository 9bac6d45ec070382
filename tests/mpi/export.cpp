// strata-ranks: 4
// strata-gloo-ranks: 4
// Consolidation streams: a ZeRO-3 trainer's weights hash, safetensors export and Hugging
// Face directory are written piece by piece, so no rank's peak memory grows by the model
// (gather_master held four full copies on every rank), and what they write is the model.
#include <filesystem>
#include <string>
#include <vector>

#include <strata/io/export.hpp>
#include <strata/io/hf_weights.hpp>
#include <strata/strata.hpp>

#include <strata/observe/resident.hpp>

#include "catch.hpp"
#include "mlp_run.hpp"
#include "shared_dir.hpp"

using namespace strata;

TEST_CASE("hash and export stream: no rank holds the model, and the file is the model") {
  environment env;
  auto& w = env.world();
  grid g(w);
  test::mlp_setup s;
  s.shape = {256, 2048, 8, 16};  // 29.9 M params, 114 MiB of fp32
  s.opts.bucket_elems = std::size_t{1} << 22;
  trainer<mlp::model, host, zero<3>> tr(g, mlp::make_model(s.shape), s.opts);
  mlp::synthetic_data data(s.shape, s.seed);
  batch<> b;
  data.fill(static_cast<std::uint64_t>(g.dp_rank() * 8), 8, b);
  tr.step(b);
  test::shared_dir dir(w, "export");
  if (w.rank() == 0) std::filesystem::create_directories(dir.path);
  const std::size_t model_bytes = tr.layout().total() * sizeof(float);

  const std::size_t before = strata::peak_resident_bytes();
  const std::uint64_t hash = weights_hash_of(tr);
  export_safetensors(tr, dir.path / "model.safetensors");
  const std::size_t grew = strata::peak_resident_bytes() - before;
  INFO("rank " << w.rank() << ": peak grew by " << grew / 1024 << " KiB for a model of " << model_bytes / 1024
               << " KiB");
  CHECK(grew < model_bytes / 2);
  // A directory that is not there: rank 0 cannot write, and every rank hears so.
  CHECK_THROWS_WITH(export_safetensors(tr, dir.path / "missing" / "model.safetensors"),
                    strata_test::contains_text(w.rank() == 0 ? "cannot create temporary file" : "world rank 0 failed"));

  // What was written is the model (gathered now, after the measurement).
  const std::vector<float> master = tr.gather_master();
  CHECK(hash == weights_hash(master));
  w.barrier();
  const auto f = safetensors_file::open(dir.path / "model.safetensors");
  std::size_t at = 0;
  for (const auto& p : tr.layout().params()) {
    const auto got = f.template read_all<float>(p.name);
    REQUIRE(got.size() == p.numel);
    CHECK(std::equal(got.begin(), got.end(), master.begin() + static_cast<long>(at)));
    at += p.numel;
  }
}

TEST_CASE("a Hugging Face directory written piece by piece, out of order, across shards") {
  environment env;
  auto& w = env.world();
  if (w.rank() != 0) return;
  const auto dir = std::filesystem::temp_directory_path() / ("strata-hf-writer-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::vector<float> a(300), c(50);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = 0.5f * static_cast<float>(i);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = -static_cast<float>(i);
  {
    // 300 + 50 floats, shards of 1 KB: "a" alone, then "c".
    hf_weights_writer out(dir, {{"model_type", "test"}}, {{"a", shape{20, 15}}, {"c", shape{50}}}, dtype::f32, 1024);
    out.write(1, 0, c);
    out.write(0, 100, std::span<const float>(a).subspan(100));
    // Incomplete: the directory is not there yet, and commit says which tensor lacks bytes.
    CHECK_THROWS_WITH(out.commit(), strata_test::contains_text("tensor \"a\" got 800 of its 1200 bytes"));
    CHECK(!std::filesystem::exists(dir));
  }
  CHECK(!std::filesystem::exists(dir.parent_path() / ("." + dir.filename().string() + ".tmp")));
  {
    hf_weights_writer out(dir, {{"model_type", "test"}}, {{"a", shape{20, 15}}, {"c", shape{50}}}, dtype::f32, 1024);
    out.write(0, 100, std::span<const float>(a).subspan(100));
    out.write(1, 0, c);
    out.write(0, 0, std::span<const float>(a).first(100));
    CHECK_THROWS_WITH(out.write(1, 40, c),
                      strata_test::contains_text("tensor \"c\" has 200 bytes; given 200 at byte 160"));
    out.commit();
  }
  const auto files = hf_weights::open(dir);
  CHECK(files.file_of("a") != files.file_of("c"));
  std::vector<float> got_a(a.size()), got_c(c.size());
  files.read("a", 0, got_a);
  files.read("c", 0, got_c);
  CHECK(got_a == a);
  CHECK(got_c == c);
  std::filesystem::remove_all(dir);
}
