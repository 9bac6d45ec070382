// Sharded checkpoints that survive anything: every rank holding a shard writes it (master
// weights and optimizer moments), world rank 0 a manifest; written to a temporary
// directory, fsynced, verified, renamed; `latest` moves last. Loading maps each element a
// rank owns in its new layout to the file and position that saved it, so a checkpoint
// loads at any tensor x data x pipeline layout and ZeRO stage.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../comm/reduce_op.hpp"
#include "../core/error.hpp"
#include "../core/hash.hpp"
#include "../core/shape.hpp"
#include "../optim/loss_scaler.hpp"
#include "../parallel/bucket_plan.hpp"
#include "detail/checkpoint_layout.hpp"
#include "detail/files.hpp"
#ifdef STRATA_TEST_FAULT_INJECTION
// Tests only: tests/support/strata_fault_injection.hpp, in the build of the mlp example
// that tests/examples/checkpoint_kill.sh kills mid-save. Library users never define it.
#include <strata_fault_injection.hpp>
#endif

namespace strata {

struct checkpoint_options {
  int keep = 2;  // complete checkpoints kept in the directory (the newest ones)
};

// What a trainer hands to save/load: identity of the model and optimizer, the rank's
// shard, and the scalar training state. The trainer fills it (train/trainer.hpp).
struct checkpoint_state {
  // This pipeline stage's params: local shapes, and the slice of the full tensor each
  // is (shard_dim -1: whole), at param_offset in this layout's padded plan.
  std::vector<std::string> names;
  std::vector<shape> shapes, full_shapes;
  std::vector<int> shard_dims;
  std::vector<std::int64_t> shard_offsets;
  std::vector<std::size_t> param_offset;
  // The whole model (every stage), in order: what identifies it across layouts.
  std::vector<std::string> model_names;
  std::vector<shape> model_full_shapes;
  const bucket_plan* plan = nullptr;
  std::string optimizer, precision;
  int state_slots = 0, stage = 0, dp_rank = 0, dp_size = 1, tp = 1, pp = 1, tp_rank = 0, pp_rank = 0;
  bool replicated_master = false;                  // stage 0: every data-parallel rank holds the whole master
  float* arrays[3] = {nullptr, nullptr, nullptr};  // master, state0, state1
  std::size_t owned = 0;                           // elements in each array
  // Calls f(padded_offset, index_in_arrays, n) for the parts of [lo, hi) this rank holds.
  std::function<void(std::size_t, std::size_t, const std::function<void(std::size_t, std::size_t, std::size_t)>&)>
      for_each_owned;
  long step = 0;
  std::vector<long> skipped;
  loss_scaler::state scaler;
  std::uint64_t seed = 0;
  nlohmann::json extra = nlohmann::json::object();  // user data: data position, ...
};

namespace detail {

// 3: a replicated master holds a tied copy's bucket once (each bucket's replica_offset);
// version 2's replicated masters are the whole padded buffer, read as such.
inline constexpr int checkpoint_format_version = 3;

inline std::string step_dir_name(long step) {
  char s[32];
  std::snprintf(s, sizeof s, "step-%08ld", step);
  return s;
}
inline std::string rank_file_name(int rank) {
  char s[32];
  std::snprintf(s, sizeof s, "rank-%05d.bin", rank);
  return s;
}

// Resolves DIR (with a `latest` pointer) or DIR/step-N to the step directory.
inline std::filesystem::path resolve_checkpoint(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "manifest.json")) return dir;
  const auto latest = dir / "latest";
  if (!std::filesystem::exists(latest))
    throw checkpoint_error(cat(dir.string(), ": no checkpoint here (neither manifest.json nor a 'latest' pointer)"));
  std::string name = read_text_file(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  const auto step_dir = dir / name;
  if (name.empty() || name.find('/') != std::string::npos || !std::filesystem::exists(step_dir / "manifest.json"))
    throw checkpoint_error(cat(latest.string(), ": points at '", name, "', which is not a complete checkpoint"));
  return step_dir;
}

// Gathers each rank's string on every rank of `world` (sizes differ).
template <class Comm>
std::vector<std::string> all_gather_strings(Comm& world, const std::string& mine) {
  std::uint64_t n = mine.size();
  std::vector<std::uint64_t> sizes(static_cast<std::size_t>(world.size()));
  world.all_gather(std::span<const std::uint64_t>(&n, 1), std::span<std::uint64_t>(sizes));
  const std::size_t most = std::max<std::size_t>(1, *std::max_element(sizes.begin(), sizes.end()));
  std::vector<std::uint8_t> padded(most), all(most * sizes.size());
  std::copy(mine.begin(), mine.end(), padded.begin());
  world.all_gather(std::span<const std::uint8_t>(padded), std::span<std::uint8_t>(all));
  std::vector<std::string> out;
  for (std::size_t r = 0; r < sizes.size(); ++r)
    out.emplace_back(reinterpret_cast<const char*>(all.data() + r * most), sizes[r]);
  return out;
}

// This (tensor, pipeline) group's entry of the manifest, given each data-parallel rank's
// {checksum, bytes, world rank} of the file it wrote.
inline nlohmann::json group_entry(const checkpoint_state& s, const std::vector<std::uint64_t>& sums) {
  nlohmann::json g;
  g["tp_rank"] = s.tp_rank;
  g["pp_rank"] = s.pp_rank;
  g["master"] = s.replicated_master ? "replicated" : "sharded";
  g["elements_per_file"] = s.owned;
  g["params"] = nlohmann::json::array();
  for (std::size_t i = 0; i < s.names.size(); ++i)
    g["params"].push_back(to_json(saved_param{s.names[i], s.shapes[i], s.full_shapes[i], s.shard_dims[i],
                                              s.shard_offsets[i], s.param_offset[i]}));
  g["buckets"] = nlohmann::json::array();
  for (const auto& b : s.plan->buckets())
    g["buckets"].push_back({{"offset", b.offset},
                            {"size", b.size},
                            {"piece", b.piece},
                            {"shard_offset", b.shard_offset},
                            {"replica_offset", b.replica_offset}});
  const int files = s.replicated_master ? 1 : s.dp_size;
  for (int r = 0; r < files; ++r)
    g["files"].push_back({{"name", rank_file_name(static_cast<int>(sums[3 * r + 2]))},
                          {"dp_rank", r},
                          {"bytes", sums[3 * r + 1]},
                          {"checksum", hex64(sums[3 * r])}});
  return g;
}

}  // namespace detail

// Saves a checkpoint of step s.step under dir: collective over `world` (every rank of
// the grid), `dp` being this rank's data-parallel group.
template <class Comm>
void save_checkpoint(Comm& world, Comm& dp, const checkpoint_state& s, const std::filesystem::path& dir,
                     const checkpoint_options& opt = {}) {
  namespace fs = std::filesystem;
  const std::string name = detail::step_dir_name(s.step);
  const fs::path tmp = dir / ("." + name + ".tmp"), final_dir = dir / name;
  // Every rank learns of a failure anywhere, so all throw together.
  int failed = 0;
  auto agree = [&] {
    world.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
    return failed != 0;
  };
  if (world.rank() == 0) {
    try {
      fs::create_directories(dir);
      fs::remove_all(tmp);  // a leftover of an interrupted save of the same step
      fs::create_directories(tmp);
    } catch (const std::exception&) {
      failed = 1;
    }
  }
  if (agree()) throw checkpoint_error(strata::cat(tmp.string(), ": cannot create the checkpoint directory"));

  // Every rank of a sharded master writes its shard; with a replicated master data-parallel
  // rank 0 of each (tensor, pipeline) group does. Files are named by world rank.
  const bool writes = !s.replicated_master || dp.rank() == 0;
  const auto path = (tmp / detail::rank_file_name(world.rank())).string();
  std::uint64_t sums[3] = {0, 0, static_cast<std::uint64_t>(world.rank())};  // checksum, bytes, world rank
  if (writes) {
    try {
      detail::posix_file f(path, O_WRONLY | O_CREAT | O_TRUNC);
      detail::checksum64_stream h;
      for (int a = 0; a < 1 + s.state_slots; ++a) {
        const std::size_t bytes = s.owned * sizeof(float);
#ifdef STRATA_TEST_FAULT_INJECTION
        if (a == 1) test::kill_in_save(world.rank(), s.step, f);  // may end this rank, its shard half written
#endif
        f.write_all(s.arrays[a], bytes);
        h.update(s.arrays[a], bytes);
        sums[1] += bytes;
      }
      f.sync();
      sums[0] = h.finish();
    } catch (const std::exception& e) {
      failed = 1;
      std::fprintf(stderr, "strata: checkpoint %s: %s\n", path.c_str(), e.what());
    }
  }
  if (agree()) throw checkpoint_error(strata::cat(tmp.string(), ": a shard could not be written"));
  std::vector<std::uint64_t> all(3 * static_cast<std::size_t>(dp.size()));
  dp.all_gather(std::span<const std::uint64_t>(sums, 3), std::span<std::uint64_t>(all));

  // Each group's data-parallel rank 0 describes its group; world rank 0 writes the manifest.
  const auto groups =
      detail::all_gather_strings(world, dp.rank() == 0 ? detail::group_entry(s, all).dump() : std::string());
  if (world.rank() == 0) {
    try {
      nlohmann::json m;
      m["format"] = "strata-checkpoint";
      m["format_version"] = detail::checkpoint_format_version;
      m["step"] = s.step;
      m["skipped_steps"] = s.skipped;
      m["loss_scaler"] = {{"scale", s.scaler.scale},
                          {"iteration", s.scaler.iteration},
                          {"last_overflow_iteration", s.scaler.last_overflow_iteration},
                          {"hysteresis_left", s.scaler.hysteresis_left}};
      m["seed"] = s.seed;
      m["extra"] = s.extra;
      m["optimizer"] = s.optimizer;
      m["state_slots"] = s.state_slots;
      m["precision"] = s.precision;
      m["layout"] = {{"tp", s.tp}, {"dp", s.dp_size}, {"pp", s.pp}, {"zero_stage", s.stage}};
      m["groups"] = nlohmann::json::array();
      for (const auto& g : groups)
        if (!g.empty()) m["groups"].push_back(nlohmann::json::parse(g));
      detail::write_file_atomic(tmp / "manifest.json", m.dump(1));
    } catch (const std::exception&) {
      failed = 1;
    }
  }
  if (agree()) throw checkpoint_error(strata::cat(tmp.string(), "/manifest.json: could not be written"));

  // Verify what reached the disk before it replaces anything: each rank re-reads its file.
  if (writes) {
    try {
      detail::posix_file f(path, O_RDONLY);
      if (f.size() != sums[1] || detail::file_checksum64(f, f.size()) != sums[0]) failed = 1;
    } catch (const std::exception&) {
      failed = 1;
    }
  }
  if (agree()) throw checkpoint_error(strata::cat(tmp.string(), ": a shard read back differs from what was written"));

  if (world.rank() == 0) {
    try {
      detail::sync_directory(tmp);
      const fs::path old = dir / ("." + name + ".old");
      if (fs::exists(final_dir)) fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      detail::sync_directory(dir);
      detail::write_file_atomic(dir / "latest", name + "\n");  // last: the new checkpoint is now the one
      fs::remove_all(old);
      // Keep the newest `keep` complete checkpoints.
      std::vector<std::string> steps;
      for (const auto& e : fs::directory_iterator(dir)) {
        const auto n = e.path().filename().string();
        if (e.is_directory() && n.rfind("step-", 0) == 0) steps.push_back(n);
      }
      std::sort(steps.begin(), steps.end());
      const std::size_t keep = static_cast<std::size_t>(std::max(1, opt.keep));
      for (std::size_t i = 0; i + keep < steps.size(); ++i)
        if (steps[i] != name) fs::remove_all(dir / steps[i]);
    } catch (const std::exception& e) {
      failed = 1;
      std::fprintf(stderr, "strata: checkpoint %s: %s\n", final_dir.c_str(), e.what());
    }
  }
  if (agree()) throw checkpoint_error(strata::cat(final_dir.string(), ": could not be put in place"));
}

// Loads dir (a checkpoint directory, or one with a `latest` pointer) into s, whatever
// tensor x data x pipeline layout and ZeRO stage saved it (collective over `world`).
template <class Comm>
void load_checkpoint(Comm& world, checkpoint_state& s, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path step_dir = detail::resolve_checkpoint(dir);
  const fs::path manifest_path = step_dir / "manifest.json";
  const std::string where = manifest_path.string();
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(detail::read_text_file(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    throw checkpoint_error(strata::cat(where, ": not valid JSON (", e.what(), ")"));
  }
  auto fail = [&](const std::string& what) { throw checkpoint_error(where + ": " + what); };
  try {
    if (m.value("format", "") != "strata-checkpoint") fail("not a strata checkpoint manifest");
    const int version = m.at("format_version").get<int>();
    if (version != detail::checkpoint_format_version && version != 2)
      fail(strata::cat("format version ", version, ", this strata reads versions 2 to ",
                       detail::checkpoint_format_version));
    if (m.at("optimizer").get<std::string>() != s.optimizer || m.at("state_slots").get<int>() != s.state_slots)
      fail(strata::cat("saved with optimizer ", m.at("optimizer").get<std::string>(), ", this run uses ", s.optimizer));
    const auto& lay = m.at("layout");
    std::vector<detail::saved_group> groups;
    for (const auto& g : m.at("groups")) groups.push_back(detail::saved_group::parse(g));
    if (groups.size() != lay.at("tp").get<std::size_t>() * lay.at("pp").get<std::size_t>())
      fail(strata::cat(groups.size(), " groups for a layout of tensor ", lay.at("tp").get<int>(), " x pipeline ",
                       lay.at("pp").get<int>()));

    // The model must be the same: names and full shapes of every param, in order.
    const auto saved = detail::saved_model(groups);
    if (saved.size() != s.model_names.size())
      fail(
          strata::cat("checkpoint of another model: ", saved.size(), " params, this model has ", s.model_names.size()));
    for (std::size_t i = 0; i < saved.size(); ++i)
      if (saved[i]->name != s.model_names[i] || !(saved[i]->full == s.model_full_shapes[i]))
        fail(strata::cat("checkpoint of another model: param ", i, " is '", saved[i]->name, "' of shape ",
                         saved[i]->full.str(), ", this model has '", s.model_names[i], "' of shape ",
                         s.model_full_shapes[i].str()));
    const auto index = detail::index_groups(groups);

    // Every rank opens every shard and checks its size (cheap); each shard's checksum is
    // checked by one rank of the world.
    const int slots = s.state_slots;
    long bad = -1, k = 0;
    std::vector<std::pair<std::size_t, std::size_t>> numbered;
    for (std::size_t g = 0; g < groups.size(); ++g) {
      auto& gr = groups[g];
      if (gr.files.size() != (gr.replicated ? 1u : lay.at("dp").get<std::size_t>()))
        fail("file count disagrees with the layout");
      for (std::size_t f = 0; f < gr.files.size(); ++f, ++k) {
        auto& file = gr.files[f];
        numbered.push_back({g, f});
        const auto path = (step_dir / file.name).string();
        if (file.bytes != gr.per_file * sizeof(float) * static_cast<std::size_t>(1 + slots))
          fail("file sizes disagree with the layout");
        try {
          file.handle = std::make_unique<detail::posix_file>(path, O_RDONLY);
        } catch (const checkpoint_error& e) {
          throw checkpoint_error(strata::cat(path, ": missing shard (", e.what(), ")"));
        }
        if (file.handle->size() != file.bytes)
          throw checkpoint_error(strata::cat(path, ": truncated or padded shard: ", file.handle->size(),
                                             " bytes, the manifest says ", file.bytes));
        if (k % world.size() == world.rank() &&
            hex64(detail::file_checksum64(*file.handle, file.bytes)) != file.checksum && bad < 0)
          bad = k;
      }
    }
    world.all_reduce(std::span<long>(&bad, 1), reduce_op::max);
    if (bad >= 0) {
      const auto [g, f] = numbered[static_cast<std::size_t>(bad)];
      throw checkpoint_error(strata::cat((step_dir / groups[g].files[f].name).string(),
                                         ": checksum does not match the manifest (the shard is corrupt)"));
    }

    // Each element this rank owns: its full-tensor index, the saved slice holding it, the
    // file and position there; consecutive positions of one file coalesce into one read.
    struct run {
      const detail::posix_file* file = nullptr;
      std::size_t per_file = 0, pos = 0, dst = 0, n = 0;
    } r;
    auto flush = [&] {
      for (int a = 0; r.n > 0 && a < 1 + slots; ++a)
        r.file->read_at(s.arrays[a] + r.dst, r.n * sizeof(float),
                        (static_cast<std::size_t>(a) * r.per_file + r.pos) * sizeof(float));
      r.n = 0;
    };
    for (std::size_t i = 0; i < s.names.size(); ++i) {
      const detail::saved_param mine{s.names[i],      s.shapes[i],        s.full_shapes[i],
                                     s.shard_dims[i], s.shard_offsets[i], s.param_offset[i]};
      const auto found = index.find(mine.name);
      if (found == index.end()) fail(strata::cat("no saved param '", mine.name, "'"));
      const auto& slices = found->second;
      std::size_t hint = 0;
      const std::size_t lo = s.param_offset[i], hi = lo + s.shapes[i].numel();
      s.for_each_owned(lo, hi, [&](std::size_t padded, std::size_t dst, std::size_t n) {
        for (std::size_t j = 0; j < n;) {
          const std::size_t full = detail::local_to_full(mine, padded - lo + j);
          std::size_t local = detail::full_to_local(groups[slices[hint].first].params[slices[hint].second], full);
          for (std::size_t t = 0; local == detail::npos && t < slices.size(); ++t)
            if ((local = detail::full_to_local(groups[slices[t].first].params[slices[t].second], full)) != detail::npos)
              hint = t;
          if (local == detail::npos) fail(strata::cat("element ", full, " of '", mine.name, "' is in no saved slice"));
          const auto& gr = groups[slices[hint].first];
          const auto& old = gr.params[slices[hint].second];
          const auto at = gr.locate(old.offset + local, where);
          const std::size_t c =
              std::min({n - j, detail::local_run(mine, padded - lo + j), detail::full_run(old, full), at.count});
          const auto* file = gr.files[at.file].handle.get();
          if (r.n > 0 && r.file == file && at.pos == r.pos + r.n && dst + j == r.dst + r.n) {
            r.n += c;
          } else {
            flush();
            r = {file, gr.per_file, at.pos, dst + j, c};
          }
          j += c;
        }
      });
    }
    flush();
    s.step = m.at("step").get<long>();
    s.skipped = m.at("skipped_steps").get<std::vector<long>>();
    const auto& ls = m.at("loss_scaler");
    s.scaler.scale = ls.at("scale").get<float>();
    s.scaler.iteration = ls.at("iteration").get<long>();
    s.scaler.last_overflow_iteration = ls.at("last_overflow_iteration").get<long>();
    s.scaler.hysteresis_left = ls.at("hysteresis_left").get<int>();
    s.seed = m.at("seed").get<std::uint64_t>();
    s.extra = m.value("extra", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    fail(strata::cat("malformed manifest: ", e.what()));
  }
}

}  // namespace strata
