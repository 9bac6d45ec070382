#!/usr/bin/env bash
# The commands in scripts/ answer as every strata program does: --help prints the usage
# and exits 0; a bad option prints one line and the usage and exits 2, before anything is
# installed or built (scripts/test --help must not run the tests).
# usage: scripts_cli.sh ROOT
set -uo pipefail
root=$1
failed=0
for s in test deps format gpu-check demo plot; do
  out=$("$root/scripts/$s" --help 2>&1)
  rc=$?
  if [ $rc != 0 ] || ! grep -q "usage: scripts/$s" <<<"$out"; then echo "FAILED: $s --help: exit $rc: $out"; failed=1; fi
done
# demo passes its options on to the qwen2 program, which answers them after the build.
for s in test deps format gpu-check plot; do
  out=$("$root/scripts/$s" --no-such-option 2>&1)
  rc=$?
  if [ $rc != 2 ] || ! grep -q "usage: scripts/$s" <<<"$out" || [ "$(grep -ci "no-such-option" <<<"$out")" != 1 ]; then
    echo "FAILED: $s --no-such-option: exit $rc: $out"
    failed=1
  fi
done
for args in "test extra" "gpu-check results --build-only" "deps --mlflow --conan"; do
  # shellcheck disable=SC2086
  out=$("$root/scripts/"$args 2>&1)
  rc=$?
  [ $rc = 2 ] || { echo "FAILED: scripts/$args: exit $rc (expected 2): $out"; failed=1; }
done
[ $failed = 0 ] && echo "scripts: 6 commands answer --help (0), 5 a bad option (2)"
exit $failed
