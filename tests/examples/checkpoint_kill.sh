#!/usr/bin/env bash
# A rank killed (SIGKILL) while a checkpoint is being written loses nothing: the
# previous checkpoint stays `latest`, loads, verifies, and resuming from it ends with
# the same weights as a run that was never interrupted. It also loads at another layout.
# MLP_BINARY is the mlp example built with the test-only kill hook (STRATA_TEST_FAULT_INJECTION);
# PLAIN_MLP, the example as shipped, must ignore the hook's variable.
# usage: checkpoint_kill.sh MLP_BINARY MPIEXEC WORK_DIR PLAIN_MLP
set -euo pipefail
mlp=$1 mpiexec=$2 work=$3 plain=$4
rm -rf "$work" && mkdir -p "$work"
hash_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights_hash"])' "$1"; }
common=(--zero 3 --steps 6 --micro-batches 2 --quiet)

"$mpiexec" -n 4 "$mlp" "${common[@]}" --report "$work/straight.json"

set +e
STRATA_FAULT_KILL_IN_SAVE=1:4 "$mpiexec" -n 4 "$mlp" "${common[@]}" --save "$work/ckpt" --save-every 2 \
  >"$work/killed.log" 2>&1
rc=$?
set -e
echo "killed run exited with $rc"
# It failed for the reason meant: mpiexec reports rank 1 killed by SIGKILL (exit code 128 + 9),
# and no rank reported an error of its own (a save that failed another way would).
[ "$rc" = 137 ] || { echo "FAILED: the run with a killed rank exited $rc, not 137 (SIGKILL):"; cat "$work/killed.log"; exit 1; }
grep -Eq "process rank 1 with PID [0-9]+ on node .* exited on signal 9" "$work/killed.log" ||
  { echo "FAILED: the log does not say rank 1 was killed:"; cat "$work/killed.log"; exit 1; }
if grep -q "mlp: error" "$work/killed.log"; then echo "FAILED: an error besides the kill:"; cat "$work/killed.log"; exit 1; fi
latest=$(cat "$work/ckpt/latest")
echo "latest after the kill: $latest"
[ "$latest" = "step-00000002" ] || { echo "FAILED: latest is '$latest', expected step-00000002"; exit 1; }

"$mpiexec" -n 4 "$mlp" "${common[@]}" --load "$work/ckpt" --report "$work/resumed.json" | tee "$work/resumed.log"
grep -q "resumed from step 2" "$work/resumed.log" || { echo "FAILED: did not resume from step 2"; exit 1; }
a=$(hash_of "$work/straight.json") b=$(hash_of "$work/resumed.json")
echo "uninterrupted $a, resumed $b"
[ "$a" = "$b" ] || { echo "FAILED: resuming changed the weights"; exit 1; }

# The same checkpoint at another layout: 2 processes, ZeRO-1.
"$mpiexec" -n 2 "$mlp" --zero 1 --steps 6 --micro-batches 2 --quiet --load "$work/ckpt" | grep "resumed from step 2"

# The hook is not in the example as shipped: the same request saves every checkpoint there.
STRATA_FAULT_KILL_IN_SAVE=1:4 "$mpiexec" -n 4 "$plain" "${common[@]}" --save "$work/plain" --save-every 2 \
  --report "$work/plain.json"
latest=$(cat "$work/plain/latest")
[ "$latest" = "step-00000006" ] || { echo "FAILED: the shipped example's latest is '$latest', expected step-00000006"; exit 1; }
c=$(hash_of "$work/plain.json")
[ "$a" = "$c" ] || { echo "FAILED: the shipped example gave $c, the test build $a"; exit 1; }
echo "checkpoint_kill: ok"
