// A seeded random-mutation fuzzer over io_targets.hpp, for compilers without libFuzzer:
// built with AddressSanitizer + UndefinedBehaviorSanitizer, it mutates valid seeds
// (written safetensors files, tests/data/configs/*.json) with byte, length-prefix and
// JSON-token edits, and runs each input through its target. Deterministic per --seed.
//   fuzz_io_mutate [--inputs N] [--seed S] [--configs DIR] [--write-seeds DIR]
// Prints the counts; exits non-zero only through a sanitizer or invariant abort.
// --write-seeds writes the safetensors seeds as files (tests/fuzz/corpus/safetensors,
// the libFuzzer seeds, were made with it) and exits.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "io_targets.hpp"

namespace {

using bytes = std::vector<std::uint8_t>;

bytes to_bytes(const std::vector<std::byte>& v) {
  bytes b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size());
  return b;
}
bytes to_bytes(std::string_view s) { return bytes(s.begin(), s.end()); }

// Valid safetensors files covering every dtype, metadata, empty and scalar tensors.
std::vector<bytes> safetensors_seeds() {
  std::vector<bytes> seeds;
  const std::vector<float> f{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<double> d{1.0, -1e300};
  const std::vector<strata::bf16> b{strata::bf16(1.0f), strata::bf16(-3.5f), strata::bf16(1e20f)};
  const std::vector<strata::fp16> h{strata::fp16(0.5f), strata::fp16(65504.0f)};
  const std::vector<std::int64_t> i64{-1, 1LL << 40};
  const std::vector<std::int32_t> i32{7, -7, 0};
  const std::vector<std::uint8_t> u8{1, 2, 3, 4, 5};
  const std::vector<std::uint16_t> u16{9};
  {
    strata::safetensors_writer w;
    w.add<float>("layers.0.weight", {2, 3}, f);
    w.add<double>("d", {2}, d);
    w.add<strata::bf16>("b", {3}, b);
    w.add<strata::fp16>("h", {1, 2}, h);
    w.add<std::int64_t>("i64", {2}, i64);
    w.add<std::int32_t>("i32", {3}, i32);
    w.add<std::uint8_t>("u8", {5}, u8);
    w.add<std::uint16_t>("u16", {}, u16);
    w.add<float>("empty", {0, 4}, std::span<const float>());
    w.metadata["format"] = "pt";
    seeds.push_back(to_bytes(w.to_bytes()));
  }
  {
    strata::safetensors_writer w;
    w.add<float>("x", {6}, f);
    seeds.push_back(to_bytes(w.to_bytes()));
  }
  {
    strata::safetensors_writer w;
    w.metadata["a"] = "b";
    w.metadata["k"] = "\xc3\xa9";
    seeds.push_back(to_bytes(w.to_bytes()));
  }
  return seeds;
}

std::vector<bytes> config_seeds(const std::filesystem::path& dir) {
  std::vector<bytes> seeds;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() != ".json") continue;
    std::ifstream in(e.path(), std::ios::binary);
    seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  for (const char* s : {R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 3})",
                        R"({"train_batch_size": 8, "optimizer": {"type": "sgd", "params": {"lr": 0.1, "momentum": 0.9}},
                            "scheduler": {"type": "WarmupCosineLR", "params": {"total_num_steps": 10}}})",
                        R"({"train_batch_size": 8, "optimizer": {"type": "lion"}, "bfloat16": {"enabled": true},
                            "scheduler": {"type": "WarmupLR", "params": {"warmup_type": "linear"}}})"})
    seeds.push_back(to_bytes(s));
  return seeds;
}

// JSON fragments that reach the typed getters' edge cases.
const std::vector<std::string> tokens = {"0",
                                         "-1",
                                         "1",
                                         "2",
                                         "3",
                                         "4",
                                         "1e400",
                                         "-1e400",
                                         "1e308",
                                         "18446744073709551615",
                                         "18446744073709551616",
                                         "9223372036854775807",
                                         "-9223372036854775808",
                                         "2147483648",
                                         "0.5",
                                         "1.0",
                                         "5e8",
                                         "-0",
                                         "true",
                                         "false",
                                         "null",
                                         "\"auto\"",
                                         "\"\"",
                                         "\"cpu\"",
                                         "\"none\"",
                                         "\"F32\"",
                                         "\"BF16\"",
                                         "\"F8_E4M3\"",
                                         "[]",
                                         "{}",
                                         "[0,0]",
                                         "[1,2,3]",
                                         "[4294967296,4294967296]",
                                         "\"__metadata__\"",
                                         "\"data_offsets\"",
                                         "\"shape\"",
                                         "\"dtype\"",
                                         "{",
                                         "}",
                                         "[",
                                         "]",
                                         ",",
                                         ":",
                                         "\"",
                                         "\\",
                                         "\\u0000",
                                         "\\ud800",
                                         "\xff",
                                         "\xc3",
                                         " ",
                                         "\n",
                                         "\"stage\"",
                                         "\"enabled\"",
                                         "\"optimizer\"",
                                         "\"scheduler\"",
                                         "\"type\"",
                                         "\"params\"",
                                         "\"betas\"",
                                         "[0.9,0.999]",
                                         "\"WarmupDecayLR\"",
                                         "\"train_batch_size\"",
                                         "\"gradient_accumulation_steps\"",
                                         "\"fp16\"",
                                         "\"bf16\"",
                                         "\"zero_optimization\""};

class mutator {
 public:
  explicit mutator(std::uint64_t seed) : rng_(seed) {}

  std::size_t pick(std::size_t n) { return n ? std::uniform_int_distribution<std::size_t>(0, n - 1)(rng_) : 0; }

  bytes mutate(const bytes& seed, const std::vector<bytes>& others, bool safetensors) {
    bytes b = seed;
    const std::size_t edits = 1 + (pick(3) == 0 ? pick(5) : 0);  // mostly one edit: deeper, still valid-ish inputs
    for (std::size_t e = 0; e < edits; ++e) edit(b, others, safetensors);
    return b;
  }

 private:
  void edit(bytes& b, const std::vector<bytes>& others, bool safetensors) {
    switch (pick(safetensors ? 10 : 8)) {
      case 0:  // flip a bit
        if (!b.empty()) b[pick(b.size())] ^= static_cast<std::uint8_t>(1u << pick(8));
        break;
      case 1:  // set a byte
        if (!b.empty()) b[pick(b.size())] = static_cast<std::uint8_t>(pick(256));
        break;
      case 2: {  // erase a range
        if (b.empty()) break;
        const std::size_t at = pick(b.size()), n = 1 + pick(std::min<std::size_t>(16, b.size() - at));
        b.erase(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + n));
        break;
      }
      case 3: {  // duplicate a range
        if (b.empty()) break;
        const std::size_t at = pick(b.size()), n = 1 + pick(std::min<std::size_t>(32, b.size() - at));
        const bytes part(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(at + n));
        b.insert(b.begin() + static_cast<long>(pick(b.size() + 1)), part.begin(), part.end());
        break;
      }
      case 4: {  // insert a JSON token
        const auto& t = tokens[pick(tokens.size())];
        b.insert(b.begin() + static_cast<long>(pick(b.size() + 1)), t.begin(), t.end());
        break;
      }
      case 5: {  // replace a run of digits or a word with a token
        if (b.empty()) break;
        std::size_t at = pick(b.size()), end = at;
        while (end < b.size() && (std::isalnum(b[end]) || b[end] == '.' || b[end] == '-' || b[end] == '"')) ++end;
        const auto& t = tokens[pick(tokens.size())];
        b.erase(b.begin() + static_cast<long>(at), b.begin() + static_cast<long>(end));
        b.insert(b.begin() + static_cast<long>(at), t.begin(), t.end());
        break;
      }
      case 6: {  // splice with another seed
        if (others.empty()) break;
        const bytes& o = others[pick(others.size())];
        const std::size_t cut = pick(b.size() + 1), from = pick(o.size() + 1);
        b.resize(cut);
        b.insert(b.end(), o.begin() + static_cast<long>(from), o.end());
        break;
      }
      case 7:  // truncate
        b.resize(pick(b.size() + 1));
        break;
      default: {  // safetensors: move the length prefix near its true value, or anywhere
        if (b.size() < 8) break;
        std::uint64_t n = 0;
        for (int i = 7; i >= 0; --i) n = (n << 8) | b[static_cast<std::size_t>(i)];
        const std::uint64_t choices[] = {n + 1 + pick(8), n - 1 - pick(8), b.size() - 8, b.size() - 7,
                                         100'000'000,     100'000'001,     ~0ull,        rng_()};
        n = choices[pick(std::size(choices))];
        for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(n >> (8 * i));
        break;
      }
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace

int main(int argc, char** argv) {
  long inputs = 100'000;
  std::uint64_t seed = 1;
  std::filesystem::path configs = std::filesystem::path(STRATA_TEST_DATA_DIR) / "configs";
  std::filesystem::path write_seeds;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--inputs")
      inputs = std::atol(argv[i + 1]);
    else if (a == "--seed")
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (a == "--configs")
      configs = argv[i + 1];
    else if (a == "--write-seeds")
      write_seeds = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: fuzz_io_mutate [--inputs N] [--seed S] [--configs DIR] [--write-seeds DIR]\n");
      return 2;
    }
  }
  const auto st_seeds = safetensors_seeds();
  if (!write_seeds.empty()) {
    std::filesystem::create_directories(write_seeds);
    for (std::size_t i = 0; i < st_seeds.size(); ++i) {
      std::ofstream out(write_seeds / ("seed" + std::to_string(i) + ".safetensors"), std::ios::binary);
      out.write(reinterpret_cast<const char*>(st_seeds[i].data()), static_cast<std::streamsize>(st_seeds[i].size()));
    }
    return 0;
  }
  const auto cfg_seeds = config_seeds(configs);
  if (cfg_seeds.size() < 10) {
    std::fprintf(stderr, "fuzz_io_mutate: found %zu config seeds in %s\n", cfg_seeds.size(), configs.c_str());
    return 2;
  }
  // The valid seeds must be accepted, or the fuzzer explores only the rejection paths.
  for (const auto& s : st_seeds)
    if (!io_fuzz::fuzz_safetensors(s.data(), s.size())) io_fuzz::broken("a valid safetensors seed is rejected");

  const auto t0 = std::chrono::steady_clock::now();
  mutator m(seed);
  long st_runs = 0, st_ok = 0, cfg_runs = 0, cfg_ok = 0;
  for (long i = 0; i < inputs; ++i) {
    if (i % 2 == 0) {
      const bytes in = m.mutate(st_seeds[m.pick(st_seeds.size())], st_seeds, true);
      st_ok += io_fuzz::fuzz_safetensors(in.data(), in.size());
      ++st_runs;
    } else {
      const bytes in = m.mutate(cfg_seeds[m.pick(cfg_seeds.size())], cfg_seeds, false);
      cfg_ok += io_fuzz::fuzz_config(in.data(), in.size());
      ++cfg_runs;
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "fuzz_io_mutate seed %llu: %ld inputs in %.1f s; safetensors %ld (%ld accepted, %ld rejected), "
      "config %ld (%ld accepted, %ld rejected); no crash, no sanitizer report\n",
      static_cast<unsigned long long>(seed), inputs, s, st_runs, st_ok, st_runs - st_ok, cfg_runs, cfg_ok,
      cfg_runs - cfg_ok);
  return 0;
}
