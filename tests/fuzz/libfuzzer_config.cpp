// libFuzzer entry for the config parser (built where the compiler provides -fsanitize=fuzzer;
// see tests/io.cmake). The target itself is in io_targets.hpp, shared with fuzz_io_mutate.
#include "io_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  io_fuzz::fuzz_config(data, size);
  return 0;
}
