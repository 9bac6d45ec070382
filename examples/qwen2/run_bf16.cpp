// examples/qwen2 on the host in bf16: its own translation unit, built in parallel with the others.
#include "run.hpp"

namespace qwen2 {

int run_host_bf16(const run_args& a) { return dispatch_run<strata::host, strata::mixed<strata::bf16>>(a); }

}  // namespace qwen2
