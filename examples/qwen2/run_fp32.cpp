// examples/qwen2 on the host in fp32: its own translation unit, built in parallel with the others.
#include "run.hpp"

namespace qwen2 {

int run_host_fp32(const run_args& a) { return dispatch_run<strata::host, strata::fp32>(a); }

}  // namespace qwen2
