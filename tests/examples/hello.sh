#!/usr/bin/env bash
# examples/hello (the README's program) as a user runs it: --help and a bad option, then
# 2 processes train it and the loss falls from chance (log 4 = 1.39) to well below.
# usage: hello.sh PROGRAM MPIEXEC WORK_DIR
set -euo pipefail
prog=$1 mpiexec=$2 work=$3
mkdir -p "$work"
help=$("$prog" --help)
grep -q "usage: hello" <<<"$help"
rc=0
"$prog" --bogus > "$work/bad.out" 2> "$work/bad.err" || rc=$?
[ "$rc" = 2 ] || { echo "hello --bogus exited $rc, expected 2"; exit 1; }
grep -q "unknown option '--bogus'" "$work/bad.err"
grep -q "usage: hello" "$work/bad.out"
"$mpiexec" -n 2 "$prog" | tee "$work/train.out"
first=$(awk '$1 == "step" && $2 == 20 {print $4}' "$work/train.out")
last=$(awk '$1 == "step" && $2 == 100 {print $4}' "$work/train.out")
[ -n "$first" ] && [ -n "$last" ] || { echo "no loss at steps 20 and 100"; exit 1; }
awk -v a="$first" -v b="$last" 'BEGIN { if (!(b < a && b < 0.5)) { print "loss " a " at step 20 -> " b " at step 100: not learning"; exit 1 } }'
echo "hello: loss $first at step 20 -> $last at step 100"
