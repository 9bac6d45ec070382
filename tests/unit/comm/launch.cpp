// How a process finds it was launched: each launcher's variables, the override, and the
// clear errors when they are incomplete or contradict the build.
#include <map>
#include <string>

#include <strata/comm/launch.hpp>

#include "catch.hpp"

using strata::detect_launch;
using strata::launcher;

namespace {

struct fake_env {
  std::map<std::string, std::string> vars;
  const char* operator()(const char* name) const {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  }
};

std::string config_error_of(const fake_env& e, bool has_mpi) {
  try {
    detect_launch(e, has_mpi);
  } catch (const strata::config_error& x) {
    return x.what();
  }
  return "no config_error";
}

const std::map<std::string, std::string> torchrun{
    {"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}};

}  // namespace

TEST_CASE("torchrun's variables launch over the rendezvous", "[launch]") {
  const auto l = detect_launch(fake_env{torchrun}, true);
  CHECK(l.kind == launcher::env);
  CHECK(l.source == "RANK, WORLD_SIZE");
  CHECK(l.rank == 2);
  CHECK(l.size == 4);
  CHECK(l.local_rank == 2);
  CHECK(l.master_addr == "10.0.0.1");
  CHECK(l.master_port == 29500);
  // Without MPI too: the same launch.
  CHECK(detect_launch(fake_env{torchrun}, false).kind == launcher::env);
  // torchrun's agent holds MASTER_PORT with its own store: the rendezvous takes the next
  // port, or the one STRATA_RENDEZVOUS_PORT names.
  fake_env agent{torchrun};
  agent.vars["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  CHECK(detect_launch(agent, true).master_port == 29501);
  agent.vars["STRATA_RENDEZVOUS_PORT"] = "31000";
  CHECK(detect_launch(agent, true).master_port == 31000);
  // The top port has no next one: named, unless STRATA_RENDEZVOUS_PORT chooses.
  agent.vars["MASTER_PORT"] = "65535";
  CHECK(detect_launch(agent, true).master_port == 31000);
  agent.vars.erase("STRATA_RENDEZVOUS_PORT");
  CHECK(config_error_of(agent, true).find("MASTER_PORT=65535 is held by torchrun's agent store") != std::string::npos);
}

TEST_CASE("an MPI launcher wins where the build has MPI", "[launch]") {
  for (const char* marker : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    fake_env e{{{marker, "4"}}};
    const auto l = detect_launch(e, true);
    CHECK(l.kind == launcher::mpi);
    CHECK(l.source == marker);
    // Ray or torchrun under an MPI job's environment: still MPI, the launcher of the processes.
    e.vars.insert(torchrun.begin(), torchrun.end());
    CHECK(detect_launch(e, true).kind == launcher::mpi);
  }
}

TEST_CASE("an MPI launcher without MPI in the build is an error, not four lone jobs", "[launch]") {
  const std::string msg = config_error_of(fake_env{{{"OMPI_COMM_WORLD_SIZE", "4"}}}, false);
  CHECK_THAT(msg, strata_test::contains_text("started by an MPI launcher (OMPI_COMM_WORLD_SIZE)"));
  CHECK_THAT(msg, strata_test::contains_text("built without MPI"));
  // One process under mpirun -np 1 is simply one process.
  CHECK(detect_launch(fake_env{{{"OMPI_COMM_WORLD_SIZE", "1"}}}, false).kind == launcher::single);
  // torchrun's variables beside them say how to form the world.
  fake_env e{torchrun};
  e.vars["PMI_RANK"] = "2";
  CHECK(detect_launch(e, false).kind == launcher::env);
}

TEST_CASE("srun without MPI: Slurm's variables, the first node as the rendezvous host", "[launch]") {
  fake_env e{{{"SLURM_PROCID", "5"},
              {"SLURM_STEP_NUM_TASKS", "8"},
              {"SLURM_LOCALID", "1"},
              {"SLURM_STEP_NODELIST", "gpu[03-06,9],cpu1"},
              {"SLURM_JOB_ID", "1234"},
              {"SLURM_STEP_ID", "2"}}};
  auto l = detect_launch(e, true);
  CHECK(l.kind == launcher::slurm);
  CHECK(l.rank == 5);
  CHECK(l.size == 8);
  CHECK(l.local_rank == 1);
  CHECK(l.master_addr == "gpu03");
  CHECK(l.master_port == 20000 + (1234 * 16 + 2) % 20000);
  e.vars["MASTER_ADDR"] = "head";
  e.vars["MASTER_PORT"] = "4000";
  l = detect_launch(e, true);
  CHECK(l.master_addr == "head");
  CHECK(l.master_port == 4000);
  // A batch script (no step of srun) is one process, whatever the allocation's size.
  CHECK(detect_launch(fake_env{{{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"}}}, true).kind == launcher::single);
  CHECK(strata::detail::first_slurm_host("node7") == "node7");
  CHECK(strata::detail::first_slurm_host("a1,b[1-2]") == "a1");
  CHECK(strata::detail::first_slurm_host("rack[012-015]") == "rack012");
  // Slurm's hostlists with a suffix after a group, and several groups in one name.
  CHECK(strata::detail::first_slurm_host("node[01-04]-ib") == "node01-ib");
  CHECK(strata::detail::first_slurm_host("rack[1-2]-n[7-8],login") == "rack1-n7");
  CHECK(strata::detail::first_slurm_host("gpu[03-05,9],cpu1") == "gpu03");
}

TEST_CASE("no launcher: one process; STRATA_LAUNCHER overrides", "[launch]") {
  CHECK(detect_launch(fake_env{}, true).kind == launcher::single);
  fake_env e{torchrun};
  e.vars["STRATA_LAUNCHER"] = "single";
  CHECK(detect_launch(e, true).kind == launcher::single);
  e.vars["OMPI_COMM_WORLD_SIZE"] = "4";
  e.vars["STRATA_LAUNCHER"] = "env";
  const auto l = detect_launch(e, true);
  CHECK(l.kind == launcher::env);
  CHECK(l.source == "STRATA_LAUNCHER=env");
  e.vars["STRATA_LAUNCHER"] = "mpi";
  CHECK(detect_launch(e, true).kind == launcher::mpi);
  CHECK_THAT(config_error_of(e, false), strata_test::contains_text("built without MPI"));
  e.vars["STRATA_LAUNCHER"] = "pmi";
  CHECK_THAT(config_error_of(e, true),
             strata_test::contains_text("STRATA_LAUNCHER=\"pmi\": expected mpi, env, slurm or single"));
}

TEST_CASE("incomplete or malformed launch variables name the variable", "[launch]") {
  fake_env e{torchrun};
  e.vars.erase("MASTER_ADDR");
  CHECK_THAT(config_error_of(e, true), strata_test::contains_text("MASTER_ADDR is not set"));
  e = fake_env{torchrun};
  e.vars["MASTER_PORT"] = "70000";
  CHECK_THAT(config_error_of(e, true),
             strata_test::contains_text("MASTER_PORT=\"70000\" is not an integer in [1, 65535]"));
  e = fake_env{torchrun};
  e.vars["RANK"] = "4";
  CHECK_THAT(config_error_of(e, true), strata_test::contains_text("RANK=\"4\" is not an integer in [0, 3]"));
  e = fake_env{torchrun};
  e.vars["WORLD_SIZE"] = "four";
  CHECK_THAT(config_error_of(e, true), strata_test::contains_text("WORLD_SIZE=\"four\""));
  // One process needs no rendezvous.
  CHECK(detect_launch(fake_env{{{"RANK", "0"}, {"WORLD_SIZE", "1"}}}, true).size == 1);
}
