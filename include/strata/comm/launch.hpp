// launch: how this process was started, read from the environment its launcher set, so a
// job runs the same under mpirun, srun, torchrun, Ray, Kubernetes or alone:
//   mpi     an MPI launcher (mpirun/mpiexec, srun with PMI/PMIx): the world is MPI's;
//   env     RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun, Ray Train,
//           TorchDistributor, Kubeflow's PyTorchJob): the world forms over Gloo;
//   slurm   srun without MPI (SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID; the first
//           node of the step is the rendezvous host): over Gloo;
//   single  one process.
// STRATA_LAUNCHER=mpi|env|slurm|single overrides what is found.
#pragma once
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "../core/error.hpp"

namespace strata {

enum class launcher { mpi, env, slurm, single };

constexpr std::string_view name_of(launcher l) {
  switch (l) {
    case launcher::mpi: return "mpi";
    case launcher::env: return "env";
    case launcher::slurm: return "slurm";
    case launcher::single: return "single";
  }
  return "?";
}

struct launch_info {
  launcher kind = launcher::single;
  std::string source;  // what decided it: the variable(s) found, or STRATA_LAUNCHER
  int rank = 0, size = 1, local_rank = 0;
  std::string master_addr;  // env and slurm: the rendezvous (rank 0's host and port)
  int master_port = 0;
};

namespace detail {

// The first host of a Slurm node list: the first expression before a top-level comma,
// each bracket group in it taken at its first value ("gpu[03-05,9],cpu1" -> "gpu03",
// "node[01-04]-ib" -> "node01-ib", "rack[1-2]-n[7-8]" -> "rack1-n7").
inline std::string first_slurm_host(std::string_view list) {
  std::string host;
  bool in_group = false, past_first = false;
  for (char c : list) {
    if (!in_group && c == ',') break;
    if (c == '[') {
      in_group = true;
      past_first = false;
    } else if (c == ']') {
      in_group = false;
    } else if (in_group) {
      past_first = past_first || c == '-' || c == ',';
      if (!past_first) host += c;
    } else {
      host += c;
    }
  }
  return host;
}

template <class Getenv>
struct launch_reader {
  Getenv& get;

  std::optional<std::string> text(const char* name) const {
    const char* s = get(name);
    if (!s || !*s) return std::nullopt;
    return std::string(s);
  }
  bool has(const char* name) const { return text(name).has_value(); }
  // A whole number in [lo, hi], or a config_error naming the variable and the launcher.
  int number(const char* name, long lo, long hi, std::string_view why) const {
    const auto s = text(name);
    expects<config_error>(s.has_value(), [&] { return cat(why, ": ", name, " is not set"); });
    char* end = nullptr;
    const long v = std::strtol(s->c_str(), &end, 10);
    expects<config_error>(*end == '\0' && v >= lo && v <= hi, [&] {
      return cat(why, ": ", name, "=\"", *s, "\" is not an integer in [", lo, ", ", hi, "]");
    });
    return static_cast<int>(v);
  }
  int number_or(const char* name, long lo, long hi, int fallback, std::string_view why) const {
    return has(name) ? number(name, lo, hi, why) : fallback;
  }
  // The MPI launcher's variable that is set, if any.
  std::optional<std::string> mpi_marker() const {
    for (const char* v :
         {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_SIZE"})
      if (has(v)) return std::string(v);
    return std::nullopt;
  }

  // A launch whose size, rank and local rank are in the named variables.
  launch_info ranks(launcher kind, std::string source, const char* size, const char* rank, const char* local,
                    std::string_view why) const {
    launch_info l;
    l.kind = kind;
    l.source = std::move(source);
    l.size = number(size, 1, 1 << 24, why);
    l.rank = number(rank, 0, l.size - 1, why);
    l.local_rank = number_or(local, 0, 1 << 24, 0, why);
    return l;
  }

  launch_info env(std::string source) const {
    constexpr std::string_view why = "a launch by RANK and WORLD_SIZE (torchrun's variables)";
    launch_info l = ranks(launcher::env, std::move(source), "WORLD_SIZE", "RANK", "LOCAL_RANK", why);
    if (l.size > 1) {
      const auto addr = text("MASTER_ADDR");
      expects<config_error>(addr.has_value(), [&] {
        return cat(why,
                   ": MASTER_ADDR is not set; set it to rank 0's host name or address, and MASTER_PORT to a "
                   "free port there");
      });
      l.master_addr = *addr;
      l.master_port = number("MASTER_PORT", 1, 65535, why);
      // torchrun's agent holds MASTER_PORT with its own store (TORCHELASTIC_USE_AGENT_STORE):
      // strata's rendezvous takes the next port, or STRATA_RENDEZVOUS_PORT.
      if (text("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True" && !has("STRATA_RENDEZVOUS_PORT")) {
        expects<config_error>(l.master_port < 65535, [&] {
          return cat(why,
                     ": MASTER_PORT=65535 is held by torchrun's agent store and strata's rendezvous takes the "
                     "next port, which does not exist; pick a lower MASTER_PORT or set STRATA_RENDEZVOUS_PORT");
        });
        ++l.master_port;
      }
      l.master_port = number_or("STRATA_RENDEZVOUS_PORT", 1, 65535, l.master_port, why);
    }
    return l;
  }

  launch_info slurm(std::string source) const {
    constexpr std::string_view why = "a launch by srun (Slurm's variables)";
    launch_info l =
        ranks(launcher::slurm, std::move(source), "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID", why);
    if (const auto a = text("MASTER_ADDR")) {
      l.master_addr = *a;
    } else {
      const auto nodes = text("SLURM_STEP_NODELIST") ? text("SLURM_STEP_NODELIST") : text("SLURM_JOB_NODELIST");
      expects<config_error>(nodes.has_value(),
                            cat(why, ": neither MASTER_ADDR nor SLURM_STEP_NODELIST names rank 0's host"));
      l.master_addr = first_slurm_host(*nodes);
    }
    // Without MASTER_PORT, a port from the job and step ids: two steps of one job that
    // run at once get different ports.
    const int job = number_or("SLURM_JOB_ID", 0, 2147483647, 0, why);
    const int step = number_or("SLURM_STEP_ID", 0, 2147483647, 0, why);
    l.master_port = number_or("MASTER_PORT", 1, 65535,
                              20000 + static_cast<int>((static_cast<long long>(job) * 16 + step) % 20000), why);
    return l;
  }

  launch_info mpi(std::string source, bool has_mpi) const {
    expects<config_error>(has_mpi, [&] {
      return cat("this process was started by an MPI launcher (", source,
                 "), but strata was built without MPI. Rebuild with MPI (an MPI compiler found by CMake), or start "
                 "the job with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or srun");
    });
    launch_info l;
    l.kind = launcher::mpi;
    l.source = std::move(source);
    return l;  // rank, size and local rank come from MPI once it started
  }

  launch_info single(std::string source) const {
    launch_info l;
    l.source = std::move(source);
    return l;
  }

  launch_info detect(bool has_mpi) const {
    if (const auto forced = text("STRATA_LAUNCHER")) {
      const std::string src = "STRATA_LAUNCHER=" + *forced;
      if (*forced == "mpi") return mpi(src, has_mpi);
      if (*forced == "env") return env(src);
      if (*forced == "slurm") return slurm(src);
      if (*forced == "single") return single(src);
      throw config_error(cat("STRATA_LAUNCHER=\"", *forced, "\": expected mpi, env, slurm or single"));
    }
    const auto marker = mpi_marker();
    if (marker && has_mpi) return mpi(*marker, true);
    if (has("RANK") && has("WORLD_SIZE")) return env("RANK, WORLD_SIZE");
    if (has("SLURM_PROCID") && has("SLURM_STEP_NUM_TASKS")) return slurm("SLURM_PROCID, SLURM_STEP_NUM_TASKS");
    // An MPI launcher's processes in a build without MPI would each train alone.
    if (marker && text("OMPI_COMM_WORLD_SIZE").value_or("1") == "1" && text("PMI_SIZE").value_or("1") == "1")
      return single(*marker + " (one process)");
    if (marker) return mpi(*marker, false);
    return single("no launcher's variables");
  }
};

}  // namespace detail

// How this process was started. `get` reads a variable (std::getenv by default).
template <class Getenv>
launch_info detect_launch(Getenv&& get, bool has_mpi) {
  return detail::launch_reader<std::remove_reference_t<Getenv>>{get}.detect(has_mpi);
}
inline launch_info detect_launch(bool has_mpi) {
  auto get = [](const char* n) -> const char* { return std::getenv(n); };
  return detect_launch(get, has_mpi);
}

}  // namespace strata
