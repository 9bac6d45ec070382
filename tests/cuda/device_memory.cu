// strata-gpu: required
// A GPU trainer's device memory, measured (trainer::device_memory()), is held to its
// memory report by the rule of space/device_memory.hpp, as tests/mpi/memory.cpp holds the
// host's resident peak: strata's allocator high-water mark and the device's used memory
// growth each within 10 % of the report's device part plus a stated allowance. First a
// tiny model, which in this fresh process pays what a first step loads (kernels' code, a
// larger stack): its growth beyond the report and the named allowances must stay under
// device_allowance::first_use. Then a 30 M-param model at ZeRO-1 bf16 (the policies of
// gpu-check's Qwen2.5-0.5B run) and at ZeRO-3 fp32 (gathered buckets). Every number is
// printed, so the first GPU run states what the allowances' estimates should be.
#include <cstdio>
#include <strata/cuda.cuh>

#include "catch.hpp"
#include "mlp_run.hpp"

namespace {

constexpr double mib = 1 << 20;

strata::environment& env() {
  static strata::environment e;
  return e;
}

strata::grid<strata::world_comm>& grid() {
  static bool selected = (strata::select_device(env().local_rank()), true);  // measures the context
  (void)selected;
  static strata::grid<strata::world_comm> g(env().world(), {});
  return g;
}

template <class Sharding, class Precision>
strata::device_memory measure(const test::mlp_setup& s) {
  strata::trainer<mlp::model, strata::cuda, Sharding, strata::adamw, Precision> tr(grid(), mlp::make_model(s.shape),
                                                                                   s.opts);
  mlp::synthetic_data data(s.shape, s.seed);
  strata::batch<> b;
  const long local = s.global_batch / grid().dp_size();
  for (long step = 0; step < s.steps; ++step) {
    data.fill(static_cast<std::uint64_t>(step * s.global_batch + grid().dp_rank() * local), local, b);
    tr.step(b);
  }
  return tr.device_memory();
}

// Prints the record and checks both rules, each verdict's text in the failure message.
void check(const char* what, const strata::device_memory& m) {
  std::printf(
      "%s: report %.1f MiB; used %.1f -> %.1f MiB (grew %.1f); strata peak grew %.1f MiB in %zu blocks; context %s; "
      "cuBLAS %.1f, comm %.1f, unattributed %.1f MiB\n",
      what, static_cast<double>(m.report) / mib, static_cast<double>(m.start_used) / mib,
      static_cast<double>(m.peak_used) / mib, static_cast<double>(m.used_growth()) / mib,
      static_cast<double>(m.strata_growth()) / mib, m.strata_blocks,
      m.context ? strata::cat(static_cast<double>(*m.context) / mib, " MiB").c_str() : "not measured",
      static_cast<double>(m.cublas) / mib, static_cast<double>(m.comms) / mib, m.unattributed() / mib);
  for (const auto& v : strata::check_device_memory(m)) {
    std::printf("  %s\n", v.text.c_str());
    INFO(what << ": " << v.text);
    CHECK(v.ok);
  }
}

}  // namespace

TEST_CASE("a GPU trainer's measured device memory is its report plus the stated allowance") {
  test::mlp_setup tiny;
  tiny.steps = 2;
  const auto first = measure<strata::zero<1>, strata::mixed<strata::bf16>>(tiny);
  check("tiny model, first in the process", first);
  // What the first step loads beyond any allocator: under the stated estimate.
  const double first_use = first.unattributed() - static_cast<double>(strata::device_allowance::page) *
                                                      static_cast<double>(first.strata_blocks);
  INFO("first use " << first_use / mib << " MiB (at most " << first.unattributed() / mib << ")");
  CHECK(first.unattributed() <= static_cast<double>(strata::device_allowance::page * first.strata_blocks +
                                                    strata::device_allowance::first_use));
  // select_device made this process's context, so NVML measured it (the driver ships NVML).
  CHECK(first.context.has_value());

  test::mlp_setup big;
  big.shape = {256, 2048, 8, 16};  // 30 M params (the host rule's model shape): the report dominates
  big.steps = 3;
  big.global_batch = 64;
  big.opts.bucket_elems = std::size_t{1} << 22;
  check("30 M params, ZeRO-1 bf16", measure<strata::zero<1>, strata::mixed<strata::bf16>>(big));
  check("30 M params, ZeRO-3 fp32", measure<strata::zero<3>, strata::fp32>(big));
}
