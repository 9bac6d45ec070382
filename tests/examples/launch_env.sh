#!/usr/bin/env bash
# Jobs started as torchrun, Ray, Kubernetes and srun start them: RANK, WORLD_SIZE,
# LOCAL_RANK, MASTER_ADDR, MASTER_PORT and no MPI (scripts/launch emulates torchrun), so
# the world forms over Gloo. At 4 processes mlp gives one weights_hash over ZeRO 0-3 and
# offload, and the loss of the mpiexec run within 1e-6; gpt at tp 2 x pp 2 the same loss;
# a peer that dies or stalls is an error naming the operation, never a hang.
# usage: launch_env.sh MLP_BINARY MPIEXEC WORK_DIR LAUNCH GPT_BINARY
set -euo pipefail
mlp=$1 mpiexec=$2 work=$3 launch=$4 gpt=$5
rm -rf "$work" && mkdir -p "$work"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
close() {  # close A B WHAT: |A - B| <= 1e-6 (1 + |B|)
  python3 - "$1" "$2" "$3" <<'PY'
import sys
a, b, what = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
ok = abs(a - b) <= 1e-6 * (1 + abs(b))
print(f"{what}: {a!r} vs mpiexec {b!r}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
PY
}

hashes=()
for z in 0 1 2 3 3o; do
  extra=()
  [[ $z == 3o ]] && extra=(--offload)
  "$launch" -n 4 -- "$mlp" --zero "${z%o}" "${extra[@]}" --steps 8 --micro-batches 2 --quiet \
    --report "$work/env-z$z.json" 2> "$work/env-z$z.err"
  hashes+=("$(field "$work/env-z$z.json" weights_hash)")
done
echo "env launch, ZeRO 0 1 2 3 3+offload: ${hashes[*]}"
[ "$(printf '%s\n' "${hashes[@]}" | sort -u | wc -l)" = 1 ] || { echo "FAILED: the stages disagree"; exit 1; }
grep -q "strata: launch env (RANK, WORLD_SIZE): 4 processes over gloo" "$work/env-z1.err" ||
  { echo "FAILED: rank 0 did not say how the job was launched"; cat "$work/env-z1.err"; exit 1; }
python3 - "$work/env-z1.json" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))["launch"]
assert l["launcher"] == "env" and l["backend"] == "gloo" and l["processes"] == 4, l
PY
"$mpiexec" -n 4 "$mlp" --zero 1 --steps 8 --micro-batches 2 --quiet --report "$work/mpi-z1.json"
close "$(field "$work/env-z1.json" final_loss)" "$(field "$work/mpi-z1.json" final_loss)" "mlp final loss"

"$launch" -n 4 -- "$gpt" --tp 2 --pp 2 --steps 4 --quiet --report "$work/env-gpt.json" 2>/dev/null
"$mpiexec" -n 4 "$gpt" --tp 2 --pp 2 --steps 4 --quiet --report "$work/mpi-gpt.json"
close "$(field "$work/env-gpt.json" final_loss)" "$(field "$work/mpi-gpt.json" final_loss)" "gpt tp 2 x pp 2 final loss"

# Started with torchrun's variables, a rank whose peers never come fails within the
# time-out, naming the rendezvous; one whose peer dies mid-job fails naming the operation.
set +e
out=$(RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=9 STRATA_COMM_TIMEOUT=2 timeout 60 "$mlp" --steps 1 --quiet 2>&1)
rc=$?
set -e
echo "a rank alone -> exit $rc: $(echo "$out" | grep -m1 rendezvous)"
[[ $rc == 2 ]] && grep -q "mlp: error: rendezvous: rank 1 .*could not connect" <<<"$out" || { echo "FAILED: $out"; exit 1; }

# Two ranks mid-job; rank 1 is killed (then: stopped). Rank 0 must end on its own, naming
# the operation it waited in: at once for a dead peer (the connection closes), after
# STRATA_COMM_TIMEOUT for a stalled one.
peer_fault() {  # peer_fault SIGNAL TIMEOUT NAME
  local port r0 r1 t0 rc
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local vars=(WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 "MASTER_PORT=$port" "STRATA_COMM_TIMEOUT=$2")
  env "${vars[@]}" RANK=1 "$mlp" --zero 2 --steps 1000000 --quiet >"$work/$3-1.log" 2>&1 &
  r1=$!
  env "${vars[@]}" RANK=0 timeout 120 "$mlp" --zero 2 --steps 1000000 --quiet >"$work/$3-0.log" 2>&1 &
  r0=$!
  sleep 3
  kill "-$1" "$r1"
  t0=$SECONDS
  set +e
  wait "$r0"
  rc=$?
  set -e
  kill -9 "$r1" 2>/dev/null || true
  wait "$r1" 2>/dev/null || true
  echo "$3: rank 0 exit $rc after $((SECONDS - t0)) s: $(grep -m1 -E 'error|timed out' "$work/$3-0.log")"
  [[ $rc != 0 && $rc != 124 ]] || { echo "FAILED: $3"; cat "$work/$3-0.log"; exit 1; }
  grep -qE "(all_reduce|reduce_scatter|all_gather|broadcast|barrier|send|recv) of [0-9]+ elements" "$work/$3-0.log" ||
    { echo "FAILED: $3: no operation named"; cat "$work/$3-0.log"; exit 1; }
}
peer_fault SIGKILL 60 dead_peer
peer_fault SIGSTOP 4 stalled_peer
