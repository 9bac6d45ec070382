// strata-diagnose DIR: reads the rank-N.json files that ranks write on a time-out or on
// SIGUSR1 (STRATA_DIAGNOSE_DIR) and says which rank(s) did not reach which operation.
// scripts/diagnose builds and runs it.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <strata/comm/hang_diagnosis.hpp>
#include <strata/comm/op_history_json.hpp>

namespace {

const char* usage =
    "usage: scripts/diagnose DIR\n"
    "  Reads DIR/rank-N.json, the last operations of each rank's communicators, written when\n"
    "  a collective times out (STRATA_COMM_TIMEOUT) or a rank gets SIGUSR1 (for example\n"
    "  `kill -USR1 <mpirun's pid>`, which Open MPI forwards to every rank). DIR is the run's\n"
    "  STRATA_DIAGNOSE_DIR, ./strata-diagnose by default. Prints which rank(s) did not reach\n"
    "  which operation. Exit status: 0 nothing pending, 1 a rank waits, 2 bad usage or files.\n";

int bad_usage(const std::string& why) {
  std::fprintf(stderr, "strata-diagnose: %s\n%s", why.c_str(), usage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (std::find(args.begin(), args.end(), "--help") != args.end() ||
      std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::fputs(usage, stdout);
    return 0;
  }
  if (args.size() != 1) return bad_usage("expected one directory");
  if (args[0].starts_with("-")) return bad_usage("unknown option " + args[0]);
  const fs::path dir = args[0];
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return bad_usage(dir.string() + " is not a directory");
  try {
    std::vector<strata::rank_dump> dumps;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (!name.starts_with("rank-") || e.path().extension() != ".json") continue;
      std::ifstream f(e.path());
      std::ostringstream text;
      text << f.rdbuf();
      dumps.push_back(strata::parse_rank_dump(text.str(), e.path().string()));
    }
    if (dumps.empty()) return bad_usage("no rank-N.json in " + dir.string());
    std::sort(dumps.begin(), dumps.end(), [](auto& a, auto& b) { return a.world_rank < b.world_rank; });
    const int world = dumps.front().world_size;
    double first = dumps.front().taken_at, last = first;
    for (const auto& d : dumps) {
      if (d.world_size != world)
        throw strata::config_error(strata::cat("rank ", d.world_rank, "'s dump is of a world of ", d.world_size,
                                               ", rank ", dumps.front().world_rank, "'s of ", world,
                                               ": the directory mixes runs; empty it before the next run"));
      first = std::min(first, d.taken_at);
      last = std::max(last, d.taken_at);
    }
    std::printf("%zu of %d ranks' last operations in %s, taken within %.1f s\n", dumps.size(), world,
                dir.string().c_str(), last - first);
    if (last - first > 60)
      std::printf("warning: the dumps were taken %.0f s apart; some may be from an earlier run\n", last - first);
    const auto h = strata::diagnose_hang(dumps, world);
    std::fputs(h.text().c_str(), stdout);
    return h.waiting.empty() && h.not_reached.empty() && h.missing.empty() ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "strata-diagnose: %s\n", e.what());
    return 2;
  }
}
