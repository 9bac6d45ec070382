// Collective time-outs: when one rank skips a collective, the others abort the job after the
// time-out with a message naming rank, operation, size, time and communicator, and a
// diagnosis naming the rank(s) that did not reach it (comm/detail/hang_watch.hpp). The abort
// is observed from outside: the test launches this binary under mpiexec, running a hidden case.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/detail/abort_hooks.hpp>
#include <strata/comm/detail/lane.hpp>
#include <strata/comm/environment.hpp>
#include <strata/comm/grid.hpp>
#include <strata/comm/op_history_json.hpp>
#include "catch.hpp"

using namespace std::chrono_literals;

TEST_CASE("the default time-out is 300 s unless STRATA_COMM_TIMEOUT says otherwise", "[timeout]") {
  const char* env = std::getenv("STRATA_COMM_TIMEOUT");
  if (env && *env)
    REQUIRE(std::abs(strata::detail::default_comm_timeout().count() - std::strtod(env, nullptr)) < 1e-9);
  else
    REQUIRE(strata::detail::default_comm_timeout() == 300s);
}

TEST_CASE("STRATA_COMM_TIMEOUT: seconds, inf held at about three years, nothing else", "[timeout]") {
  using strata::detail::parse_comm_timeout;
  CHECK(parse_comm_timeout("2.5").count() == 2.5);
  CHECK(parse_comm_timeout("inf").count() == strata::detail::max_comm_timeout_s);
  CHECK(parse_comm_timeout("1e300").count() == strata::detail::max_comm_timeout_s);
  // The longest deadline is still in the future on the clocks the waits use.
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(parse_comm_timeout("inf"));
  CHECK(deadline > std::chrono::steady_clock::now());
  // A communicator's own time-out is held the same way, and refused where not positive.
  CHECK(strata::detail::checked_comm_timeout(std::chrono::duration<double>(INFINITY)).count() ==
        strata::detail::max_comm_timeout_s);
  CHECK_THROWS_WITH(strata::detail::checked_comm_timeout(std::chrono::duration<double>(NAN)),
                    strata_test::contains_text("must be positive"));
  for (const char* bad : {"0", "-1", "nan", "", "10s", "abc"})
    CHECK_THROWS_WITH(parse_comm_timeout(bad), strata_test::contains_text(std::string("STRATA_COMM_TIMEOUT=\"") + bad +
                                                                          "\" is not a positive number of seconds"));
}

#if STRATA_HAS_MPI
namespace {

struct outcome {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

int run_shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// A fresh directory for the ranks' dumps (STRATA_DIAGNOSE_DIR).
std::string fresh_dir() {
  char dir[] = "/tmp/strata_diagnose_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  return dir;
}

// Runs `mpiexec -n N <this binary> "<test name>"` with extra environment settings.
outcome launch(const std::string& test_name, const std::string& env, int ranks = 2) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(len > 0);
  exe[len] = '\0';
  char out_path[] = "/tmp/strata_timeout_XXXXXX";
  const int fd = mkstemp(out_path);
  REQUIRE(fd >= 0);
  close(fd);
  // The root/oversubscription settings only matter in containers (oversubscription: Open
  // MPI 4's variable, then 5's); timeout(1) bounds a hang.
  const std::string cmd =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_rmaps_base_oversubscribe=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe " +
      env + " timeout 120 mpiexec -n " + std::to_string(ranks) + " '" + exe + "' '" + test_name + "' > " + out_path +
      " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  outcome o;
  o.exit_code = run_shell(cmd);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.output = read_text(out_path);
  std::remove(out_path);
  return o;
}

// scripts/diagnose DIR, as a user runs it after the job.
outcome diagnose(const std::string& dir) {
  const std::string out = dir + "/diagnose.txt";
  outcome o;
  o.exit_code =
      run_shell(std::string(STRATA_TEST_DATA_DIR) + "/../../scripts/diagnose '" + dir + "' > '" + out + "' 2>&1");
  o.output = read_text(out);
  return o;
}

}  // namespace

TEST_CASE("a collective one rank skips times out and aborts the job (STRATA_COMM_TIMEOUT)", "[timeout]") {
  const auto dir = fresh_dir();
  const auto o = launch("timeout child: world all_reduce", "STRATA_COMM_TIMEOUT=1 STRATA_DIAGNOSE_DIR=" + dir);
  INFO(o.output);
  REQUIRE(o.exit_code != 0);
  REQUIRE(o.exit_code != 124);  // aborted by strata, not killed by timeout(1)
  REQUIRE(o.output.find("strata: rank 0: all_reduce of 7 elements timed out after 1 s on world") != std::string::npos);
  REQUIRE(o.seconds < 25);  // the skipping rank sleeps 30 s: the abort ended the job first
}

TEST_CASE("a time-out set on one communicator of a grid names that communicator", "[timeout]") {
  const auto dir = fresh_dir();
  const auto o = launch("timeout child: data broadcast", "STRATA_DIAGNOSE_DIR=" + dir);
  INFO(o.output);
  REQUIRE(o.exit_code != 0);
  REQUIRE(o.exit_code != 124);
  REQUIRE(o.output.find("strata: rank 1: broadcast of 1000 elements timed out after 1.5 s on data") !=
          std::string::npos);
  REQUIRE(o.output.find("broadcast #1 of 1000 elements from root rank 0 on data (ranks 0, 1): rank 1 waits") !=
          std::string::npos);
  REQUIRE(o.output.find("rank 0 did not reach broadcast #1 on data") != std::string::npos);
  REQUIRE(o.seconds < 25);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a hang names its rank: one rank of 4 that sleeps before a collective", "[timeout][diagnose]") {
  const auto dir = fresh_dir();
  const auto o = launch("timeout child: rank 2 late", "STRATA_COMM_TIMEOUT=1 STRATA_DIAGNOSE_DIR=" + dir, 4);
  INFO(o.output);
  REQUIRE(o.exit_code != 0);
  REQUIRE(o.exit_code != 124);
  REQUIRE(o.seconds < 25);  // rank 2 sleeps 30 s
  // Printed once, by rank 0, the lowest rank waiting; the other two wait for it.
  REQUIRE(o.output.find("strata: rank 0: diagnosis from the last operations of 4 of 4 ranks") != std::string::npos);
  REQUIRE(o.output.find("all_reduce #3 of 7 elements on world (ranks 0-3): ranks 0, 1, 3 wait") != std::string::npos);
  REQUIRE(o.output.find("rank 2 did not reach all_reduce #3 on world") != std::string::npos);
  REQUIRE(o.output.find("rank 2: its last operation, all_reduce #2 of 7 elements on world, ended") !=
          std::string::npos);
  REQUIRE(o.output.find("strata: rank 1: diagnosis") == std::string::npos);
  // Rank 0 ended the job, and ran its abort hooks first.
  REQUIRE(std::filesystem::exists(dir + "/abort-hook-0"));
  // Every rank wrote its operations; scripts/diagnose reads them to the same conclusion.
  for (int r = 0; r < 4; ++r) REQUIRE(std::filesystem::exists(dir + "/rank-" + std::to_string(r) + ".json"));
  const auto d = diagnose(dir);
  INFO(d.output);
  REQUIRE(d.exit_code == 1);
  REQUIRE(d.output.find("4 of 4 ranks' last operations") != std::string::npos);
  REQUIRE(d.output.find("rank 2 did not reach all_reduce #3 on world") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("SIGUSR1 to mpiexec makes each rank write its last operations; scripts/diagnose reads them", "[diagnose]") {
  const auto dir = fresh_dir();
  const auto o = launch("timeout child: SIGUSR1", "STRATA_DIAGNOSE_DIR=" + dir);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  REQUIRE(o.output.find("strata: rank 1: wrote its last operations to " + dir + "/rank-1.json (SIGUSR1)") !=
          std::string::npos);
  const auto d = diagnose(dir);
  INFO(d.output);
  REQUIRE(d.exit_code == 0);
  REQUIRE(d.output.find("2 of 2 ranks' last operations") != std::string::npos);
  REQUIRE(d.output.find("no operation is pending on any communicator") != std::string::npos);
  // The dump holds the operations with their sequence numbers, oldest first.
  const auto dump = strata::parse_rank_dump(read_text(dir + "/rank-0.json"), "rank-0.json");
  REQUIRE(dump.reason == "SIGUSR1");
  const strata::comm_history* world = nullptr;
  for (const auto& c : dump.comms)
    if (c.name == "world") world = &c;
  REQUIRE(world != nullptr);
  REQUIRE(world->collectives == 3);
  REQUIRE(world->ops.size() == 3);
  REQUIRE(world->ops[2].seq == 3);
  REQUIRE(world->ops[2].op == "broadcast");
  REQUIRE(world->ops[2].bytes == 5 * sizeof(double));
  REQUIRE(world->ops[2].done());
  std::filesystem::remove_all(dir);
}

// The children: run only when named (hidden from a plain run by the [.] tag).
TEST_CASE("timeout child: world all_reduce", "[.]") {
  strata::environment env;
  auto& w = env.world();
  std::vector<float> x(7);
  if (w.rank() == 0)
    w.all_reduce(std::span(x));
  else
    std::this_thread::sleep_for(30s);
}

TEST_CASE("timeout child: rank 2 late", "[.]") {
  strata::environment env;
  auto& w = env.world();
  // What a program registers to run before the abort (an MLflow run marks itself FAILED).
  const std::string mark = std::string(std::getenv("STRATA_DIAGNOSE_DIR")) + "/abort-hook-" + std::to_string(w.rank());
  strata::detail::add_abort_hook([mark] { std::ofstream(mark) << "ran\n"; });
  std::vector<float> x(7);
  w.all_reduce(std::span(x));
  w.all_reduce(std::span(x));
  if (w.rank() == 2) std::this_thread::sleep_for(30s);
  w.all_reduce(std::span(x));
}

TEST_CASE("timeout child: SIGUSR1", "[.]") {
  strata::environment env;
  auto& w = env.world();
  std::vector<float> x(7);
  w.all_reduce(std::span(x));
  w.all_reduce(std::span(x));
  std::vector<double> y(5);
  w.broadcast(std::span(y), 0);
  // As a user does from outside: SIGUSR1 to mpiexec (this rank's parent here), which
  // Open MPI forwards to every rank.
  if (w.rank() == 0) REQUIRE(kill(getppid(), SIGUSR1) == 0);
  const std::string file = strata::detail::diagnose_dir() + "/rank-" + std::to_string(w.rank()) + ".json";
  for (int i = 0; i < 200 && !std::filesystem::exists(file); ++i) std::this_thread::sleep_for(50ms);
  REQUIRE(std::filesystem::exists(file));
}

TEST_CASE("timeout child: data broadcast", "[.]") {
  strata::environment env;
  auto& w = env.world();
  strata::grid g(w, {});
  g.data().set_timeout(1.5s);
  std::vector<double> x(1000);
  if (w.rank() == 1)
    g.data().broadcast(std::span(x), 0);
  else
    std::this_thread::sleep_for(30s);
}
#endif
