// What a trainer reports: per-step statistics, and the bytes each rank holds by
// category and by space (compute space vs host-offloaded), as in DESIGN §4.
#pragma once
#include <cstddef>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace strata {

struct step_stats {
  long step = 0;         // 1-based number of this optimizer step (skipped ones count)
  float loss = 0;        // mean over the global batch
  double grad_norm = 0;  // global L2 norm of the averaged, unscaled gradient (before clipping)
  float lr = 0;          // learning rate used (or that would have been used)
  float loss_scale = 1;  // fp16 dynamic loss scale in force for this step
  bool skipped = false;  // non-finite gradients: no update on any rank
  // When skipped: the first param, in layout order over every rank, whose gradient held
  // an inf or a NaN (its dotted name, as in checkpoints), or "" when none did (the loss
  // alone was not finite).
  std::string nonfinite_param;
  double seconds = 0;        // wall time of the step
  double idle_seconds = 0;   // time this rank waited for pipeline neighbours
  double samples_per_s = 0;  // global batch rows / seconds
  int host_threads = 0;      // threads of the host's loops and GEMMs (OMP_NUM_THREADS; space/host_threads.hpp)
};

struct memory_report {
  // Bytes per rank. Categories: params, grads, master, optimizer_states, comm_buffers.
  std::map<std::string, std::size_t> bytes;
  // Which of those live in host memory because of offload_optimizer.
  std::map<std::string, bool> offloaded;

  std::size_t total() const {
    std::size_t t = 0;
    for (auto& [k, v] : bytes) t += v;
    return t;
  }
  std::size_t in_space(bool host_offloaded) const {
    std::size_t t = 0;
    for (auto& [k, v] : bytes)
      if (offloaded.count(k) && offloaded.at(k) == host_offloaded) t += v;
    return t;
  }
  // A device trainer's bytes on its device: the compute space's, less io_staging, which
  // is host memory in every space (the whole-model walks assemble pieces on the host).
  std::size_t device_bytes() const {
    const auto io = bytes.find("io_staging");
    const bool io_counted = io != bytes.end() && offloaded.count(io->first) && !offloaded.at(io->first);
    return in_space(false) - (io_counted ? io->second : 0);
  }
  nlohmann::json to_json() const {
    nlohmann::json j;
    for (auto& [k, v] : bytes) j[k] = v;
    j["total"] = total();
    j["compute_space"] = in_space(false);
    j["host_offloaded"] = in_space(true);
    return j;
  }
};

}  // namespace strata
