#!/usr/bin/env bash
# Every benchmark answers as every program does: --help prints its usage and exits 0; a
# bad option prints a line and the usage and exits 2; never an abort or a core dump.
# usage: cli.sh BENCH_BINARY...
set -uo pipefail
failed=0
for b in "$@"; do
  name=$(basename "$b")
  out=$("$b" --help 2>&1)
  rc=$?
  if [ $rc != 0 ] || ! grep -q "usage:" <<<"$out"; then echo "FAILED: $name --help: exit $rc: $out"; failed=1; fi
  out=$("$b" --no-such-option 1 2>&1)
  rc=$?
  if [ $rc != 2 ] || ! grep -q "usage:" <<<"$out" || grep -qiE "abort|signal|core dumped|terminate called" <<<"$out"; then
    echo "FAILED: $name --no-such-option: exit $rc: $out"
    failed=1
  fi
done
[ $failed = 0 ] && echo "bench: $# benchmarks answer --help (0) and a bad option (2)"
exit $failed
