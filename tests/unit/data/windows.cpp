// Token files (llm.c's layout, uint16 and uint32) and the windows a step reads: the
// contract (window i, step s, data-parallel shares, wrapping epochs), shuffling that is a
// per-epoch permutation, and bad files refused naming the file and the offset.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "catch.hpp"
#include "strata/data/windows.hpp"

namespace fs = std::filesystem;

namespace {

// A token file with the given header and tokens (width 2 or 4 bytes).
fs::path write_tokens(const std::string& tag, std::int32_t magic, std::int32_t version, std::int32_t count,
                      const std::vector<std::uint32_t>& tokens, int width) {
  const fs::path p = fs::temp_directory_path() / ("strata-tokens-" + tag + "-" + std::to_string(::getpid()));
  std::ofstream f(p, std::ios::binary);
  std::int32_t header[256] = {magic, version, count};
  f.write(reinterpret_cast<const char*>(header), sizeof header);
  for (auto t : tokens) {
    if (width == 2) {
      const auto v = static_cast<std::uint16_t>(t);
      f.write(reinterpret_cast<const char*>(&v), 2);
    } else {
      f.write(reinterpret_cast<const char*>(&t), 4);
    }
  }
  return p;
}

std::vector<std::uint32_t> iota_tokens(std::uint32_t n, std::uint32_t mod) {
  std::vector<std::uint32_t> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = i % mod;
  return v;
}

}  // namespace

TEST_CASE("token files: uint16 and uint32 layouts read back") {
  const auto t16 = iota_tokens(100, 60000), t32 = iota_tokens(100, 151936);
  const auto p16 = write_tokens("u16", 20240520, 1, 100, t16, 2), p32 = write_tokens("u32", 20240801, 7, 100, t32, 4);
  const strata::token_file a(p16), b(p32);
  CHECK(a.size() == 100);
  CHECK(a.token_bytes() == 2);
  CHECK(b.token_bytes() == 4);
  for (std::uint64_t i = 0; i < 100; ++i) {
    REQUIRE(a[i] == t16[i]);
    REQUIRE(b[i] == t32[i]);
  }
  CHECK_NOTHROW(b.check_below(151936));
  CHECK_THROWS_WITH(b.check_below(50),
                    strata_test::contains_text("token 50 at offset 1224 (token 50) is not below the vocab size 50"));
  fs::remove(p16);
  fs::remove(p32);
}

TEST_CASE("token files: a wrong magic, a count past the end, a short file are refused naming file and offset") {
  const auto wrong = write_tokens("magic", 1234, 1, 10, iota_tokens(10, 9), 2);
  CHECK_THROWS_WITH(strata::token_file(wrong),
                    strata_test::contains_text(wrong.string() + ": magic 1234 version 1 at offset 0"));
  const auto longer = write_tokens("count", 20240520, 1, 11, iota_tokens(10, 9), 2);
  CHECK_THROWS_WITH(strata::token_file(longer),
                    strata_test::contains_text("the header (offset 8) counts 11 tokens, the file holds 10"));
  const fs::path tiny = fs::temp_directory_path() / ("strata-tokens-tiny-" + std::to_string(::getpid()));
  std::ofstream(tiny) << "abc";
  CHECK_THROWS_WITH(strata::token_file(tiny), strata_test::contains_text("shorter than the 1024-byte header"));
  CHECK_THROWS_AS(strata::token_file(tiny.string() + ".missing"), strata::checkpoint_error);
  for (const auto& p : {wrong, longer, tiny}) fs::remove(p);
}

TEST_CASE("windows: step s of batch B reads windows [sB, (s+1)B), inputs and shifted labels, ranks' shares") {
  // 1 + 10 * 4 tokens: 10 windows of seq 4; token k is k.
  const auto p = write_tokens("windows", 20240801, 7, 41, iota_tokens(41, 1000), 4);
  const strata::token_file f(p);
  const strata::token_windows w(f, 4, 6);
  CHECK(w.windows() == 10);
  strata::tensor<float> in, tg;
  // Step 1 of 6 rows: windows 6..9, then 0, 1 (the epoch wraps); rank 1 of 2 takes rows 3..5.
  w.fill(1, 1, 2, in, tg);
  REQUIRE(in.shape() == strata::shape{3, 4});
  const std::uint64_t want[3] = {9, 0, 1};
  for (int r = 0; r < 3; ++r)
    for (int t = 0; t < 4; ++t) {
      CHECK(in[r * 4 + t] == static_cast<float>(want[r] * 4 + t));
      CHECK(tg[r * 4 + t] == static_cast<float>(want[r] * 4 + t + 1));
    }
  // The global batch is the concatenation of the ranks' shares, whatever their number.
  strata::tensor<float> whole, whole_t, part, part_t;
  w.fill(3, 0, 1, whole, whole_t);
  for (int rank = 0; rank < 3; ++rank) {
    w.fill(3, rank, 3, part, part_t);
    for (int k = 0; k < 8; ++k) REQUIRE(part[k] == whole[rank * 8 + k]);
  }
  CHECK_THROWS_WITH(w.fill(0, 0, 4, in, tg), strata_test::contains_text("6 rows does not split over 4"));
  fs::remove(p);
}

TEST_CASE("windows: shuffling is a per-epoch permutation, the same for the same seed") {
  const auto p = write_tokens("shuffle", 20240520, 1, 1 + 7 * 3, iota_tokens(22, 100), 2);
  const strata::token_file f(p);
  const strata::token_windows a(f, 3, 7, 11), b(f, 3, 7, 11), c(f, 3, 7, 12);
  std::vector<std::uint64_t> e0, e1;
  for (std::uint64_t r = 0; r < 7; ++r) {
    e0.push_back(a.window_of(0, r));
    e1.push_back(a.window_of(1, r));
    CHECK(a.window_of(0, r) == b.window_of(0, r));
  }
  CHECK(std::set<std::uint64_t>(e0.begin(), e0.end()).size() == 7);  // every window once an epoch
  CHECK(std::set<std::uint64_t>(e1.begin(), e1.end()).size() == 7);
  CHECK(e0 != e1);  // another order the next epoch
  bool differs = false;
  for (std::uint64_t r = 0; r < 7; ++r) differs = differs || c.window_of(0, r) != e0[r];
  CHECK(differs);  // another seed, another order
  fs::remove(p);
}

TEST_CASE("windows: a mask file turns the labels it zeroes into ignore_label, and bad masks are refused") {
  const auto p = write_tokens("masked", 20240520, 1, 13, iota_tokens(13, 100), 2);
  std::vector<std::uint32_t> m(13, 1);
  m[2] = m[3] = m[9] = 0;  // token 2, 3 and 9 are not trained on as labels
  const auto pm = write_tokens("mask", 20240520, 1, 13, m, 2);
  const strata::token_file f(p), mask(pm);
  strata::token_windows w(f, 4, 3);
  w.set_mask(mask);
  strata::tensor<float> in, tg;
  w.fill(0, 0, 1, in, tg);
  for (int k = 0; k < 12; ++k) {
    const int label = k + 1;  // window r's target t is token 4r + t + 1
    INFO("label token " << label);
    CHECK(in[k] == static_cast<float>(k));
    CHECK(tg[k] == (m[static_cast<std::size_t>(label)] ? static_cast<float>(label) : strata::ignore_label));
  }
  // A mask of another length, or with a value other than 0 and 1.
  const auto short_mask = write_tokens("mask-short", 20240520, 1, 12, std::vector<std::uint32_t>(12, 1), 2);
  const strata::token_file sm(short_mask);
  CHECK_THROWS_WITH(w.set_mask(sm), strata_test::contains_text("12 mask values for the 13 tokens"));
  m[5] = 2;
  const auto two = write_tokens("mask-two", 20240520, 1, 13, m, 2);
  const strata::token_file tm(two);
  CHECK_THROWS_WITH(w.set_mask(tm), strata_test::contains_text("mask value 2 at offset 1034 (token 5) is not 0 or 1"));
  for (const auto& q : {p, pm, short_mask, two}) fs::remove(q);
}
