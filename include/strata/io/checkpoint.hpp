// Sharded checkpoints that survive anything: every rank writes its shard of master
// weights and optimizer moments, rank 0 a manifest; written to a temporary directory,
// fsynced, verified, renamed; `latest` moves last. Loading maps each rank's new shard
// onto the saved one, so a checkpoint loads at any data-parallel size and ZeRO stage.
#pragma once
#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../core/error.hpp"
#include "../core/shape.hpp"
#include "../optim/loss_scaler.hpp"
#include "../parallel/bucket_plan.hpp"
#include "detail/files.hpp"

namespace strata {

struct checkpoint_options {
  int keep = 2;  // complete checkpoints kept in the directory (the newest ones)
};

// What a trainer hands to save/load: identity of the model and optimizer, the rank's
// shard, and the scalar training state. The trainer fills it (train/trainer.hpp).
struct checkpoint_state {
  std::vector<std::string> names;
  std::vector<shape> shapes;
  std::vector<std::size_t> param_offset;  // padded offsets in this layout's plan
  const bucket_plan* plan = nullptr;
  std::string optimizer, precision;
  int state_slots = 0, stage = 0, dp_rank = 0, dp_size = 1, tp = 1, pp = 1;
  bool replicated_master = false;  // stage 0: every rank holds the whole master
  float* arrays[3] = {nullptr, nullptr, nullptr};  // master, state0, state1
  std::size_t owned = 0;                            // elements in each array
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

inline constexpr int checkpoint_format_version = 1;

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
inline std::string hex(std::uint64_t v) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(v));
  return s;
}

// Test hook: STRATA_FAULT_KILL_IN_SAVE="rank:step" kills that rank halfway through
// writing its shard of that step, to prove an interrupted save loses nothing.
inline bool fault_kill_requested(int rank, long step) {
  const char* v = std::getenv("STRATA_FAULT_KILL_IN_SAVE");
  if (!v) return false;
  int r = -1;
  long s = -1;
  return std::sscanf(v, "%d:%ld", &r, &s) == 2 && r == rank && s == step;
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

}  // namespace detail

// Saves a checkpoint of step s.step under dir (collective over the data-parallel ranks).
template <class Comm>
void save_checkpoint(Comm& dp, const checkpoint_state& s, const std::filesystem::path& dir,
                     const checkpoint_options& opt = {}) {
  namespace fs = std::filesystem;
  const std::string name = detail::step_dir_name(s.step);
  const fs::path tmp = dir / ("." + name + ".tmp"), final_dir = dir / name;
  int failed = 0;
  if (dp.rank() == 0) {
    try {
      fs::create_directories(dir);
      fs::remove_all(tmp);  // a leftover of an interrupted save of the same step
      fs::create_directories(tmp);
    } catch (const std::exception&) {
      failed = 1;
    }
  }
  dp.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
  if (failed) throw checkpoint_error(detail::cat(tmp.string(), ": cannot create the checkpoint directory"));

  // Every rank of a sharded master writes its shard; with a replicated master rank 0 does.
  const bool writes = !s.replicated_master || dp.rank() == 0;
  std::uint64_t sums[2] = {0, 0};  // checksum, bytes
  if (writes) {
    const auto path = (tmp / detail::rank_file_name(dp.rank())).string();
    detail::posix_file f(path, O_WRONLY | O_CREAT | O_TRUNC);
    detail::checksum64_stream h;
    for (int a = 0; a < 1 + s.state_slots; ++a) {
      const std::size_t bytes = s.owned * sizeof(float);
      if (a == 1 && detail::fault_kill_requested(dp.rank(), s.step)) {
        f.sync();
        std::raise(SIGKILL);
      }
      f.write_all(s.arrays[a], bytes);
      h.update(s.arrays[a], bytes);
      sums[1] += bytes;
    }
    f.sync();
    sums[0] = h.finish();
  }
  std::vector<std::uint64_t> all(2 * static_cast<std::size_t>(dp.size()));
  dp.all_gather(std::span<const std::uint64_t>(sums, 2), std::span<std::uint64_t>(all));

  if (dp.rank() == 0) {
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
      m["layout"] = {{"tp", s.tp}, {"dp", s.dp_size}, {"pp", s.pp}, {"zero_stage", s.stage},
                     {"master", s.replicated_master ? "replicated" : "sharded"}, {"elements_per_file", s.owned}};
      for (std::size_t i = 0; i < s.names.size(); ++i) {
        std::vector<std::int64_t> dims(s.shapes[i].dims.begin(), s.shapes[i].dims.begin() + s.shapes[i].rank);
        m["params"].push_back({{"name", s.names[i]}, {"shape", dims}, {"dtype", "F32"}, {"offset", s.param_offset[i]}});
      }
      for (const auto& b : s.plan->buckets())
        m["buckets"].push_back({{"offset", b.offset}, {"size", b.size}, {"piece", b.piece}, {"shard_offset", b.shard_offset}});
      const int files = s.replicated_master ? 1 : dp.size();
      for (int r = 0; r < files; ++r)
        m["files"].push_back({{"name", detail::rank_file_name(r)}, {"rank", r}, {"bytes", all[2 * r + 1]},
                              {"checksum", detail::hex(all[2 * r])}});
      detail::write_file_atomic(tmp / "manifest.json", m.dump(1));
    } catch (const std::exception&) {
      failed = 1;
    }
  }
  dp.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
  if (failed) throw checkpoint_error(detail::cat(tmp.string(), "/manifest.json: could not be written"));

  // Verify what reached the disk before it replaces anything: each rank re-reads its file.
  if (writes) {
    const auto path = (tmp / detail::rank_file_name(dp.rank())).string();
    detail::posix_file f(path, O_RDONLY);
    std::vector<char> back(f.size());
    if (!back.empty()) f.read_at(back.data(), back.size(), 0);
    if (back.size() != sums[1] || detail::checksum64(back.data(), back.size()) != sums[0]) failed = 1;
  }
  dp.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
  if (failed) throw checkpoint_error(detail::cat(tmp.string(), ": a shard read back differs from what was written"));

  if (dp.rank() == 0) {
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
  dp.all_reduce(std::span<int>(&failed, 1), reduce_op::max);
  if (failed) throw checkpoint_error(detail::cat(final_dir.string(), ": could not be put in place"));
}

// Loads dir (a checkpoint directory, or one with a `latest` pointer) into s, whatever
// data-parallel size and ZeRO stage saved it (collective over the data-parallel ranks).
template <class Comm>
void load_checkpoint(Comm& dp, checkpoint_state& s, const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  const fs::path step_dir = detail::resolve_checkpoint(dir);
  const fs::path manifest_path = step_dir / "manifest.json";
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(detail::read_text_file(manifest_path));
  } catch (const nlohmann::json::exception& e) {
    throw checkpoint_error(detail::cat(manifest_path.string(), ": not valid JSON (", e.what(), ")"));
  }
  auto fail = [&](const std::string& what) { throw checkpoint_error(manifest_path.string() + ": " + what); };
  try {
    if (m.value("format", "") != "strata-checkpoint") fail("not a strata checkpoint manifest");
    if (m.at("format_version").get<int>() != detail::checkpoint_format_version)
      fail(detail::cat("format version ", m.at("format_version").get<int>(), ", this strata reads version ",
                       detail::checkpoint_format_version));
    const auto& lay = m.at("layout");
    if (lay.at("tp").get<int>() != s.tp || lay.at("pp").get<int>() != s.pp)
      fail(detail::cat("saved with tensor x pipeline = ", lay.at("tp").get<int>(), " x ", lay.at("pp").get<int>(),
                       "; loading at ", s.tp, " x ", s.pp, " needs the consolidated export (safetensors)"));
    if (m.at("optimizer").get<std::string>() != s.optimizer || m.at("state_slots").get<int>() != s.state_slots)
      fail(detail::cat("saved with optimizer ", m.at("optimizer").get<std::string>(), ", this run uses ", s.optimizer));
    // The model must be the same: names and shapes, in order.
    const auto& params = m.at("params");
    if (params.size() != s.names.size())
      fail(detail::cat("checkpoint of another model: ", params.size(), " params, this model has ", s.names.size()));
    std::vector<std::size_t> old_offset(params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& p = params[i];
      const auto pname = p.at("name").get<std::string>();
      const auto dims = p.at("shape").get<std::vector<std::int64_t>>();
      std::vector<std::int64_t> want(s.shapes[i].dims.begin(), s.shapes[i].dims.begin() + s.shapes[i].rank);
      if (pname != s.names[i] || dims != want)
        fail(detail::cat("checkpoint of another model: param ", i, " is '", pname, "' of shape ", nlohmann::json(dims).dump(),
                         ", this model has '", s.names[i], "' of shape ", s.shapes[i].str()));
      old_offset[i] = p.at("offset").get<std::size_t>();
    }
    struct old_bucket {
      std::size_t offset, size, piece, shard_offset;
    };
    std::vector<old_bucket> buckets;
    for (const auto& b : m.at("buckets"))
      buckets.push_back({b.at("offset").get<std::size_t>(), b.at("size").get<std::size_t>(),
                         b.at("piece").get<std::size_t>(), b.at("shard_offset").get<std::size_t>()});
    const bool old_replicated = lay.at("master").get<std::string>() == "replicated";
    const std::size_t per_file = lay.at("elements_per_file").get<std::size_t>();
    const auto& files = m.at("files");
    const int slots = s.state_slots;

    // Every rank checks every file's size (cheap); each file's checksum is checked by one rank.
    std::vector<std::unique_ptr<detail::posix_file>> handles(files.size());
    long bad = -1;
    std::string why;
    for (std::size_t f = 0; f < files.size(); ++f) {
      const auto path = (step_dir / files[f].at("name").get<std::string>()).string();
      const std::size_t want = files[f].at("bytes").get<std::size_t>();
      if (want != per_file * sizeof(float) * static_cast<std::size_t>(1 + slots)) fail("file sizes disagree with the layout");
      try {
        handles[f] = std::make_unique<detail::posix_file>(path, O_RDONLY);
      } catch (const checkpoint_error& e) {
        throw checkpoint_error(detail::cat(path, ": missing shard (", e.what(), ")"));
      }
      if (handles[f]->size() != want)
        throw checkpoint_error(detail::cat(path, ": truncated or padded shard: ", handles[f]->size(), " bytes, the manifest says ", want));
      if (static_cast<int>(f % static_cast<std::size_t>(dp.size())) == dp.rank()) {
        std::vector<char> bytes(want);
        if (want) handles[f]->read_at(bytes.data(), want, 0);
        if (detail::hex(detail::checksum64(bytes.data(), bytes.size())) != files[f].at("checksum").get<std::string>() && bad < 0)
          bad = static_cast<long>(f);
      }
    }
    dp.all_reduce(std::span<long>(&bad, 1), reduce_op::max);
    if (bad >= 0)
      throw checkpoint_error(detail::cat((step_dir / files[static_cast<std::size_t>(bad)].at("name").get<std::string>()).string(),
                                         ": checksum does not match the manifest (the shard is corrupt)"));

    // Read exactly the ranges this rank owns in the new layout from where they were saved.
    auto read_old = [&](std::size_t old_padded, std::size_t dst_index, std::size_t n) {
      while (n > 0) {
        std::size_t file = 0, pos = old_padded, count = n;
        if (!old_replicated) {
          auto it = std::upper_bound(buckets.begin(), buckets.end(), old_padded,
                                     [](std::size_t v, const old_bucket& b) { return v < b.offset; });
          if (it == buckets.begin()) fail("a param offset lies before the first bucket");
          const auto& b = *(it - 1);
          const std::size_t within = old_padded - b.offset;
          if (within >= b.size) fail("a param offset lies outside every bucket");
          file = within / b.piece;
          pos = b.shard_offset + within % b.piece;
          count = std::min(n, b.piece - within % b.piece);
        }
        if (file >= files.size() || pos + count > per_file) fail("a param range lies outside the saved shards");
        for (int a = 0; a < 1 + slots; ++a)
          handles[file]->read_at(s.arrays[a] + dst_index, count * sizeof(float),
                                 (static_cast<std::size_t>(a) * per_file + pos) * sizeof(float));
        old_padded += count;
        dst_index += count;
        n -= count;
      }
    };
    for (std::size_t i = 0; i < s.names.size(); ++i) {
      const std::size_t lo = s.param_offset[i], hi = lo + s.shapes[i].numel();
      s.for_each_owned(lo, hi, [&](std::size_t padded, std::size_t index, std::size_t n) {
        read_old(old_offset[i] + (padded - lo), index, n);
      });
    }
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
    fail(detail::cat("malformed manifest: ", e.what()));
  }
}

}  // namespace strata
