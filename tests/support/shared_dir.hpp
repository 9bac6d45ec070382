// Test support: a temporary directory every rank of a communicator agrees on (named
// after rank 0's pid), removed by rank 0 once every rank is done with it.
#pragma once
#include <unistd.h>

#include <exception>
#include <filesystem>
#include <span>
#include <strata/comm/environment.hpp>
#include <string>

namespace test {

struct shared_dir {
  strata::world_comm& world;
  std::filesystem::path path;
  shared_dir(strata::world_comm& w, const std::string& tag) : world(w) {
    long pid = static_cast<long>(::getpid());
    w.broadcast(std::span<long>(&pid, 1), 0);
    path = std::filesystem::temp_directory_path() / ("strata-test-" + tag + "-" + std::to_string(pid));
    if (w.rank() == 0) std::filesystem::remove_all(path);
    w.barrier();
  }
  // While an exception unwinds this rank, its peers are not at this barrier: waiting for
  // them would hide the error behind a communication time-out. The directory is left.
  ~shared_dir() {
    if (std::uncaught_exceptions() > 0) return;
    world.barrier();
    std::error_code ec;
    if (world.rank() == 0) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace test
