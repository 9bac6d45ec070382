#!/usr/bin/env bash
# A job over two machines, as torchrun --nnodes 2, Ray and Kubeflow's PyTorchJob start
# one: two network namespaces joined by a veth pair stand for the machines (each with a
# loopback of its own; node0 at 10.231.0.1, node1 at 10.231.0.2, the link named strata0 on
# both), each with its host name and the /etc/hosts Debian and Ubuntu write, where a
# machine's own name is 127.0.1.1 (a rank that offered its host name's address to its
# peers, as strata's Gloo device once did, offered them loopback). Two ranks a machine, torchrun's variables, no MPI, so the world is Gloo's:
#  - MASTER_ADDR node0's address: mlp at ZeRO 3 with offload and gpt at tp 2 x pp 2 give
#    the weights_hash of the same job on one machine (scripts/launch);
#  - mpirun --hostfile (Open MPI's daemons started through an agent in ssh's place): the
#    weights of mpiexec on one machine;
#  - MASTER_ADDR the name node0 (torchrun's c10d rendezvous gives the host name), loopback
#    on node0: rank 0 listens on every address and node0's Gloo devices open on strata0,
#    to the same weights; with STRATA_RENDEZVOUS_BIND=master the job fails within the
#    time-out naming the rendezvous, never hangs; chosen by hand (STRATA_RENDEZVOUS_BIND=any,
#    STRATA_GLOO_IFNAME) it trains to the same weights;
#  - a network partition mid-job: every rank ends within the time-out, naming the
#    operation it waited in.
# Needs root and network namespaces (ip netns); without them it says so and exits 77
# (skipped).
# usage: two_machines.sh MLP_BINARY MPIEXEC WORK_DIR LAUNCH GPT_BINARY
set -euo pipefail
mlp=$1 mpiexec=$2 work=$3 launch=$4 gpt=$5
rm -rf "$work" && mkdir -p "$work"
field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }

tag=st$$ # names of this run's own: two runs at once share nothing
ns=("${tag}a" "${tag}b")
net=10.231.0
cleanup() {
  for n in "${ns[@]}"; do
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
    rm -rf "/etc/netns/$n"
  done
}
trap cleanup EXIT
[[ $(id -u) == 0 ]] || { echo "skipped: two machines of network namespaces need root"; exit 77; }
if ! ip netns add "${ns[0]}" 2>"$work/netns.err"; then
  echo "skipped: no network namespaces here (ip netns add: $(cat "$work/netns.err"))"
  exit 77
fi
ip netns add "${ns[1]}"
ip link add "${tag}0" type veth peer name "${tag}1"
for i in 0 1; do
  ip link set "${tag}$i" netns "${ns[i]}"
  ip -n "${ns[i]}" link set "${tag}$i" name strata0
  ip -n "${ns[i]}" addr add "$net.$((i + 1))/24" dev strata0
  ip -n "${ns[i]}" link set strata0 up
  ip -n "${ns[i]}" link set lo up
  # ip netns exec mounts /etc/netns/NAME/hosts over /etc/hosts.
  mkdir -p "/etc/netns/${ns[i]}"
  printf '127.0.0.1 localhost\n127.0.1.1 node%d\n%s.%d node%d\n' "$i" "$net" $((2 - i)) $((1 - i)) \
    >"/etc/netns/${ns[i]}/hosts"
done

# job NAME MASTER_ADDR PROGRAM ARGS...: ranks 0 and 1 on node0, 2 and 3 on node1, each
# with torchrun's variables and the environment in `extra`; rank 0 writes NAME.json.
# Returns how many ranks failed.
extra=()
job() {
  local name=$1 addr=$2 r pids=() failed=0
  shift 2
  for r in 0 1 2 3; do
    # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
    ip netns exec "${ns[r / 2]}" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$((r / 2))" env RANK=$r LOCAL_RANK=$((r % 2)) WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 \
      MASTER_ADDR="$addr" MASTER_PORT=29500 STRATA_JOB_SECRET=two-machines-$$ "${extra[@]}" \
      timeout 300 "$@" --quiet --report "$work/$name.json" >"$work/$name-$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1 2 3; do wait "${pids[r]}" || failed=$((failed + 1)); done
  return "$failed"
}
same_hash() {  # same_hash NAME ONE_MACHINE_NAME
  local a b
  a=$(field "$work/$1.json" weights_hash) b=$(field "$work/$2.json" weights_hash)
  echo "$1: weights_hash $a, on one machine $b"
  [[ $a == "$b" ]] || { echo "FAILED: $1 differs from the job on one machine"; exit 1; }
}
show() { for r in 0 1 2 3; do sed "s/^/  [$1 rank $r] /" "$work/$1-$r.log"; done; }

mlp_args=(--zero 3 --offload --steps 6 --micro-batches 2)
gpt_args=(--tp 2 --pp 2 --steps 3)
"$launch" -n 4 -- "$mlp" "${mlp_args[@]}" --quiet --report "$work/one-mlp.json" >"$work/one-mlp.log" 2>&1 ||
  { cat "$work/one-mlp.log"; echo "FAILED: mlp on one machine"; exit 1; }
"$launch" -n 4 -- "$gpt" "${gpt_args[@]}" --quiet --report "$work/one-gpt.json" >"$work/one-gpt.log" 2>&1 ||
  { cat "$work/one-gpt.log"; echo "FAILED: gpt on one machine"; exit 1; }

job mlp "$net.1" "$mlp" "${mlp_args[@]}" || { show mlp; echo "FAILED: mlp over two machines"; exit 1; }
same_hash mlp one-mlp
job gpt "$net.1" "$gpt" "${gpt_args[@]}" || { show gpt; echo "FAILED: gpt over two machines"; exit 1; }
same_hash gpt one-gpt

# mpirun with a hostfile, as on a cluster without a scheduler: Open MPI starts its daemon on
# each machine through an agent in ssh's place (here: into the machine's namespace), its
# TCP transport between them. The same weights as mpiexec on one machine. (Open MPI 4's
# option names; with another MPI this part says so and is left out.)
if "$mpiexec" --version 2>/dev/null | grep -qE "\((Open MPI|OpenRTE)\) 4\."; then
  printf 'node0 slots=2\nnode1 slots=2\n' >"$work/hostfile"
  cat >"$work/agent" <<AGENT
#!/bin/sh
# agent HOST COMMAND...: runs COMMAND on HOST, as ssh would
case \$1 in node0) n=${ns[0]} ;; node1) n=${ns[1]} ;; *) echo "agent: no machine \$1" >&2; exit 1 ;; esac
host=\$1
shift
exec ip netns exec "\$n" unshare --uts sh -c 'hostname "\$0" && exec sh -c "\$1"' "\$host" "\$*"
AGENT
  chmod +x "$work/agent"
  for program in mlp gpt; do
    args=("${mlp_args[@]}")
    [[ $program == gpt ]] && args=("${gpt_args[@]}")
    "$mpiexec" -n 4 "${!program}" "${args[@]}" --quiet --report "$work/one-mpi-$program.json" >"$work/one-mpi-$program.log" 2>&1 ||
      { cat "$work/one-mpi-$program.log"; echo "FAILED: $program under mpiexec on one machine"; exit 1; }
    # shellcheck disable=SC2016  # $0 and $@ are the inner shell's
    ip netns exec "${ns[0]}" unshare --uts sh -c 'hostname node0 && exec "$@"' x timeout 300 "$mpiexec" -n 4 \
      --hostfile "$work/hostfile" --mca plm_rsh_agent "$work/agent" --mca btl tcp,self \
      --mca btl_tcp_if_include strata0 --mca oob_tcp_if_include strata0 \
      "${!program}" "${args[@]}" --quiet --report "$work/hostfile-$program.json" >"$work/hostfile-$program.log" 2>&1 ||
      { cat "$work/hostfile-$program.log"; echo "FAILED: $program under mpirun --hostfile over two machines"; exit 1; }
    same_hash "hostfile-$program" "one-mpi-$program"
  done
else
  echo "mpirun --hostfile over two machines: left out ($mpiexec is not Open MPI 4)"
fi

# MASTER_ADDR=node0, as torchrun's c10d rendezvous gives it: 127.0.1.1 on node0, which
# node1 cannot reach. Rank 0 listens on every address and node0's Gloo devices open on
# strata0 (decision 0047), and says so: the job trains to the same weights.
job named node0 "$mlp" "${mlp_args[@]}" || { show named; echo "FAILED: MASTER_ADDR=node0 did not train"; exit 1; }
same_hash named one-mlp
for said in 'strata: rendezvous on *:29500 (MASTER_ADDR="node0" is 127.0.1.1 here, loopback,' \
  "Gloo here opens on strata0 ($net.1)"; do
  grep -qF "$said" "$work/named-0.log" || { show named; echo "FAILED: rank 0 did not say: $said"; exit 1; }
done
grep -m1 "rendezvous on" "$work/named-0.log" | sed 's/^/  rank 0: /'

# STRATA_RENDEZVOUS_BIND=master keeps rank 0 on MASTER_ADDR's loopback: node1's ranks fail
# within the time-out naming the rendezvous, never hang.
extra=(STRATA_RENDEZVOUS_BIND=master STRATA_COMM_TIMEOUT=5)
t0=$SECONDS
if job master node0 "$mlp" "${mlp_args[@]}"; then
  show master
  echo "FAILED: a job whose rank 0 listens on loopback trained across machines"
  exit 1
fi
echo "STRATA_RENDEZVOUS_BIND=master: failed as expected in $((SECONDS - t0)) s"
grep -q "rendezvous: rank 2 .*could not connect" "$work/master-2.log" ||
  { show master; echo "FAILED: rank 2's error does not name the rendezvous"; exit 1; }
grep -m1 rendezvous "$work/master-2.log" | sed 's/^/  rank 2: /'

# Both chosen by hand, as on machines with several networks: the same weights.
extra=(STRATA_RENDEZVOUS_BIND=any STRATA_GLOO_IFNAME=strata0)
job chosen node0 "$mlp" "${mlp_args[@]}" || { show chosen; echo "FAILED: the chosen interface did not train"; exit 1; }
same_hash chosen one-mlp

# A network partition mid-job: node1's link goes down (no reset: packets are just lost, as
# when a switch port or a node's network dies). Every rank ends on its own, within the
# time-out, naming the operation it waited in: a hang here is DeepSpeed's ZeRO-3 hang.
extra=(STRATA_COMM_TIMEOUT=10)
job partition "$net.1" "$mlp" --zero 3 --steps 1000000 &
partition=$!
sleep 4
ip -n "${ns[1]}" link set strata0 down
t0=$SECONDS
if wait "$partition"; then
  show partition
  echo "FAILED: a job split by a partition ended well"
  exit 1
fi
echo "partition: every rank ended $((SECONDS - t0)) s after it"
((SECONDS - t0 < 60)) || { show partition; echo "FAILED: the ranks took over 60 s to end"; exit 1; }
for r in 0 1 2 3; do
  grep -qE "(all_reduce|reduce_scatter|all_gather|broadcast|barrier|send|recv) of [0-9]+ elements" \
    "$work/partition-$r.log" || { show partition; echo "FAILED: rank $r's error names no operation"; exit 1; }
done
for r in 0 2; do grep -m1 -E "error|timed out" "$work/partition-$r.log" | sed "s/^/  rank $r: /"; done
echo "two machines: passed"
