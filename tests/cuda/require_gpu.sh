#!/usr/bin/env bash
# On a machine without a GPU, a GPU test skips (exit 77), and with STRATA_REQUIRE_GPU=1
# (what scripts/gpu-check sets) the same test fails instead: a machine meant to have a GPU
# cannot pass by skipping. Where a GPU is present there is nothing to check (skipped).
# usage: require_gpu.sh GPU_TEST_BINARY
set -uo pipefail
bin=$1
out=$(STRATA_REQUIRE_GPU=1 "$bin" 2>&1)
rc=$?
if [ $rc -eq 0 ]; then echo "a GPU is present: nothing to check here"; exit 77; fi
if [ $rc -eq 77 ]; then echo "FAILED: skipped although STRATA_REQUIRE_GPU=1: $out"; exit 1; fi
grep -q "STRATA_REQUIRE_GPU=1 says this machine must have one" <<<"$out" || { echo "FAILED (exit $rc): $out"; exit 1; }
STRATA_REQUIRE_GPU=0 "$bin" >/dev/null 2>&1
rc=$?
[ $rc -eq 77 ] || { echo "FAILED: without STRATA_REQUIRE_GPU=1 the test exits $rc, not 77 (skipped)"; exit 1; }
echo "STRATA_REQUIRE_GPU=1 turns the skip into a failure: $out"
