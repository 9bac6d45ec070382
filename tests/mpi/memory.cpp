// strata-ranks: 4
// The memory report is the truth: for replicated and ZeRO-1/2/3 at 4 ranks, how much each
// rank's resident peak grows from before the trainer is built, through steps, a save, a
// load, an export and a weights hash, stays within 10 % of tr.memory().total(), plus an
// allowance for the libraries' own buffers; and the report does not overstate it either.
#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/io/export.hpp>
#include <strata/observe/resident.hpp>
#include <strata/strata.hpp>

#include "catch.hpp"
#include "mlp_run.hpp"
#include "shared_dir.hpp"

using namespace strata;

namespace {

constexpr double mib = 1 << 20;

// What the libraries hold beyond the trainer's buffers, measured on this machine (Open MPI
// 4.1, OpenBLAS, 4 ranks): a first run of a tiny model grows each rank's peak by about
// 1 MiB beyond its report (BLAS's and MPI's first-use buffers; asserted below within
// `fixed`), and MPI's all-reduce holds a scratch copy of half the buffer it reduces (a
// reduce per owner, one block): half the largest bucket.
constexpr std::size_t fixed = std::size_t{4} << 20;

struct measured {
  std::size_t report = 0, scratch = 0;
  std::vector<std::pair<const char*, std::size_t>> grew;  // peak growth after each phase
};

template <class Sharding>
measured measure(grid<world_comm>& g, const test::mlp_setup& s, const std::filesystem::path& dir) {
  measured m;
  malloc_trim(0);  // what an earlier trainer freed goes back to the kernel first
  g.world().barrier();
  REQUIRE(reset_peak_resident());
  const std::size_t base = resident_bytes();
  const auto mark = [&](const char* what) { m.grew.emplace_back(what, peak_resident_bytes() - base); };
  trainer<mlp::model, host, Sharding> tr(g, mlp::make_model(s.shape), s.opts);
  mark("built");
  mlp::synthetic_data data(s.shape, s.seed);
  batch<> b;
  const long local = s.global_batch / g.dp_size();
  for (long step = 0; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + g.dp_rank() * local), local, b);
    tr.step(b);
  }
  mark("steps");
  const auto ckpt = dir / Sharding::name;
  tr.save(ckpt);
  mark("save");
  tr.load(ckpt);
  mark("load");
  export_safetensors(tr, dir / (std::string(Sharding::name) + ".safetensors"));
  mark("export");
  (void)weights_hash_of(tr);
  mark("hash");
  m.report = tr.memory().total();
  for (const auto& bk : tr.plan().buckets()) m.scratch = std::max(m.scratch, bk.size * sizeof(float) / 2);
  return m;
}

template <class Sharding>
void check(grid<world_comm>& g, const test::mlp_setup& s, const std::filesystem::path& dir) {
  const measured m = measure<Sharding>(g, s, dir);
  const std::size_t allowance = fixed + m.scratch;
  std::string line = cat(Sharding::name, " rank ", g.world().rank(), ": report ", m.report / mib, " MiB, growth");
  for (const auto& [what, bytes] : m.grew) line += cat(" ", what, " ", bytes / mib);
  if (g.world().rank() == 0) std::printf("%s (allowance %.2f MiB)\n", line.c_str(), allowance / mib);
  INFO(line << " (allowance " << allowance / mib << " MiB)");
  for (const auto& [what, bytes] : m.grew) {
    INFO("after " << what);
    CHECK(static_cast<double>(bytes) <= 1.1 * static_cast<double>(m.report) + static_cast<double>(allowance));
  }
  CHECK(static_cast<double>(m.grew.back().second) >= 0.9 * static_cast<double>(m.report));
}

}  // namespace

TEST_CASE("each rank's peak memory grows by its memory report, at every stage and after save, load and export") {
  environment env;
  auto& w = env.world();
  grid g(w);
  test::shared_dir dir(w, "memory");
  if (w.rank() == 0) std::filesystem::create_directories(dir.path);
  w.barrier();

  // First a tiny model: the libraries' first-use buffers, which the allowance covers.
  test::mlp_setup tiny;
  tiny.steps = 2;
  {
    const measured m = measure<replicated>(g, tiny, dir.path);
    INFO("tiny model: report " << m.report / mib << " MiB, grew " << m.grew.back().second / mib << " MiB");
    CHECK(m.grew.back().second <= m.report + fixed);
  }

  test::mlp_setup s;
  s.shape = {256, 1024, 6, 16};  // 5.5 M params, 21 MiB of fp32: large next to the allowance
  s.steps = 2;
  s.global_batch = 64;
  s.opts.bucket_elems = std::size_t{1} << 18;
  check<replicated>(g, s, dir.path);
  check<zero<1>>(g, s, dir.path);
  check<zero<2>>(g, s, dir.path);
  check<zero<3>>(g, s, dir.path);
}

// A gradient between layers lives only until the layer below has made its own, so the
// trainer keeps three whatever the depth: four more hidden blocks add, per row, their
// outputs and their caches' h and dh (3 x hidden floats each), and no gradient.
TEST_CASE("activations grow with depth by each layer's output and cache, not by a gradient per boundary") {
  environment env;
  grid g(env.world());
  test::mlp_setup s;
  s.steps = 2;
  const auto activations = [&](int blocks) {
    s.shape.layers = blocks;
    return test::run_mlp<replicated>(g, s).memory.bytes.at("activations");
  };
  const std::size_t shallow = activations(2), deep = activations(6);
  const std::size_t rows = static_cast<std::size_t>(s.global_batch / g.dp_size());
  const std::size_t per_block = rows * 3 * static_cast<std::size_t>(s.shape.hidden) * sizeof(float);
  INFO("activations: 2 blocks " << shallow << " bytes, 6 blocks " << deep << ", per block " << per_block);
  CHECK(deep - shallow == 4 * per_block);
}
