// Collective time-outs: when one rank skips a collective, the others abort the job after the
// time-out with a message naming rank, operation, size, time and communicator. The abort is
// observed from outside: the test launches this binary under mpiexec, running a hidden case.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/detail/lane.hpp>
#include <strata/comm/environment.hpp>
#include <strata/comm/grid.hpp>
#include "catch.hpp"

using namespace std::chrono_literals;

TEST_CASE("the default time-out is 300 s unless STRATA_COMM_TIMEOUT says otherwise", "[timeout]") {
  const char* env = std::getenv("STRATA_COMM_TIMEOUT");
  if (env && *env)
    REQUIRE(std::abs(strata::detail::default_comm_timeout().count() - std::strtod(env, nullptr)) < 1e-9);
  else
    REQUIRE(strata::detail::default_comm_timeout() == 300s);
}

#if STRATA_HAS_MPI
namespace {

struct outcome {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

// Runs `mpiexec -n 2 <this binary> "<test name>"` with extra environment settings.
outcome launch(const std::string& test_name, const std::string& env) {
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  REQUIRE(len > 0);
  exe[len] = '\0';
  char out_path[] = "/tmp/strata_timeout_XXXXXX";
  const int fd = mkstemp(out_path);
  REQUIRE(fd >= 0);
  close(fd);
  // The root/oversubscription settings only matter in containers; timeout(1) bounds a hang.
  const std::string cmd =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
      "OMPI_MCA_rmaps_base_oversubscribe=1 " +
      env + " timeout 120 mpiexec -n 2 '" + exe + "' '" + test_name + "' --use-colour no > " + out_path + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  const int status = std::system(cmd.c_str());
  outcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(out_path);
  std::ostringstream s;
  s << f.rdbuf();
  o.output = s.str();
  std::remove(out_path);
  return o;
}

}  // namespace

TEST_CASE("a collective one rank skips times out and aborts the job (STRATA_COMM_TIMEOUT)", "[timeout]") {
  const auto o = launch("timeout child: world all_reduce", "STRATA_COMM_TIMEOUT=1");
  INFO(o.output);
  REQUIRE(o.exit_code != 0);
  REQUIRE(o.exit_code != 124);  // aborted by strata, not killed by timeout(1)
  REQUIRE(o.output.find("strata: rank 0: all_reduce of 7 elements timed out after 1 s on world") != std::string::npos);
  REQUIRE(o.seconds < 25);  // the skipping rank sleeps 30 s: the abort ended the job first
}

TEST_CASE("a time-out set on one communicator of a grid names that communicator", "[timeout]") {
  const auto o = launch("timeout child: data broadcast", "");
  INFO(o.output);
  REQUIRE(o.exit_code != 0);
  REQUIRE(o.exit_code != 124);
  REQUIRE(o.output.find("strata: rank 1: broadcast of 1000 elements timed out after 1.5 s on data") !=
          std::string::npos);
  REQUIRE(o.seconds < 25);
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
