#!/usr/bin/env bash
# The example as a user runs it: `mpiexec -n 4 mlp --zero Z --report r.json` gives one
# weights_hash for Z = 0..3 (and with --offload), for fp32 and bf16, and the same with
# --profile; bad options fail with a clear message and exit code 2.
# usage: mlp_stages.sh MLP_BINARY MPIEXEC WORK_DIR
set -euo pipefail
mlp=$1 mpiexec=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
hash_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["weights_hash"])' "$1"; }
for precision in fp32 bf16; do
  hashes=()
  for z in 0 1 2 3; do
    "$mpiexec" -n 4 "$mlp" --zero "$z" --precision "$precision" --steps 8 --micro-batches 2 --quiet \
      --report "$work/z$z-$precision.json"
    hashes+=("$(hash_of "$work/z$z-$precision.json")")
  done
  for z in 1 2 3; do
    "$mpiexec" -n 4 "$mlp" --zero "$z" --offload --precision "$precision" --steps 8 --micro-batches 2 --quiet \
      --report "$work/z$z-offload-$precision.json"
    hashes+=("$(hash_of "$work/z$z-offload-$precision.json")")
  done
  unique=$(printf '%s\n' "${hashes[@]}" | sort -u | wc -l)
  echo "$precision: ${hashes[*]}"
  [ "$unique" = 1 ] || { echo "FAILED: $precision stages gave $unique different weights hashes"; exit 1; }
done
# The report has the keys a user reads.
python3 - "$work/z2-fp32.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for key in ("final_loss", "weights_hash", "skipped_steps", "memory"):
    assert key in r, f"report lacks {key}"
assert isinstance(r["final_loss"], float) and isinstance(r["skipped_steps"], list)
assert r["memory"]["master"] > 0
PY
# --profile: rank 0 shows where each step's time went, and the weights stay the same.
"$mpiexec" -n 4 "$mlp" --zero 2 --precision fp32 --steps 8 --micro-batches 2 --log-every 4 --profile \
  --report "$work/profiled.json" >"$work/profiled.log"
[ "$(hash_of "$work/profiled.json")" = "$(hash_of "$work/z2-fp32.json")" ] ||
  { echo "FAILED: --profile changed the weights"; exit 1; }
[ "$(grep -c '^profile of step' "$work/profiled.log")" = 2 ] || { echo "FAILED: not 2 profiles (steps 4, 8)"; cat "$work/profiled.log"; exit 1; }
for part in "blocks forward" "blocks backward" "loss backward" "optimizer" "gradient norm" "sum of the parts" \
  "comm reduce_scatter"; do
  grep -q "^  $part " "$work/profiled.log" || { echo "FAILED: the profile has no '$part'"; cat "$work/profiled.log"; exit 1; }
done
grep -A14 '^profile of step 8' "$work/profiled.log"
# Bad input: a clear error, exit code 2, no hang.
for bad in "--zero 5" "--micro-batches 0" "--steps -1" "--lr -0.1" "--precision fp8" "--batch 30 --micro-batches 4" \
  "--zero 0 --offload" "--bogus 1" "--bucket -5" "--features 0" "--hidden 4294967297"; do
  set +e
  out=$("$mpiexec" -n 2 "$mlp" $bad --quiet 2>&1)
  rc=$?
  set -e
  echo "mlp $bad -> exit $rc: $(echo "$out" | grep 'mlp: error' | head -1)"
  [ "$rc" = 2 ] || { echo "FAILED: '$bad' exited $rc, not 2"; exit 1; }
  grep -q "mlp: error: " <<<"$out" || { echo "FAILED: '$bad' gave no clear message"; exit 1; }
done
# Consolidated export: the safetensors package reads the file, and the weights in it are
# exactly the ones the report's hash covers (FNV-1a over the fp32 bits in model order).
"$mpiexec" -n 4 "$mlp" --zero 3 --steps 3 --quiet --report "$work/export.json" --export "$work/model.safetensors"
python3 - "$work/export.json" "$work/model.safetensors" <<'PY'
import json, sys
import numpy as np
from safetensors.numpy import load_file
report = json.load(open(sys.argv[1]))
tensors = load_file(sys.argv[2])
order = []
for i in range(3):
    order += [f"blocks.{i}.fc.weight", f"blocks.{i}.fc.bias"]
order += ["head.weight", "head.bias"]
assert sorted(order) == sorted(tensors), sorted(tensors)
h = 0xcbf29ce484222325
for name in order:
    for byte in tensors[name].astype(np.float32).tobytes():
        h = ((h ^ byte) * 0x100000001b3) & 0xffffffffffffffff
assert f"{h:016x}" == report["weights_hash"], (f"{h:016x}", report["weights_hash"])
print("export: safetensors holds the hashed weights", report["weights_hash"])
PY
# ... and they come back in as initial weights, at another layout.
out=$("$mpiexec" -n 2 "$mlp" --zero 1 --steps 0 --quiet --init "$work/model.safetensors" --report "$work/import.json")
[ "$(hash_of "$work/import.json")" = "$(hash_of "$work/export.json")" ] || { echo "FAILED: --init did not load the exported weights"; exit 1; }
# No step ran: no loss to report, not a 0 that reads as one.
grep -q "^final loss none (no step ran) " <<<"$out" || { echo "FAILED: --steps 0's final line: $out"; exit 1; }
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["final_loss"] is None' "$work/import.json" ||
    { echo "FAILED: --steps 0's report has a final_loss"; exit 1; }

# A DeepSpeed config decides the policies: ZeRO-2, bf16, AdamW, batch 64 in 2 micro-batches.
cfg=$(dirname "$0")/../../examples/configs/ds_zero2_bf16.json
"$mpiexec" -n 4 "$mlp" --config "$cfg" --steps 3 --quiet --report "$work/config.json"
python3 - "$work/config.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["policy"] == {"sharding": "zero2", "optimizer": "adamw", "precision": "bf16"}, r["policy"]
PY
set +e
out=$("$mpiexec" -n 2 "$mlp" --config "$cfg" --zero 1 --quiet 2>&1)
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "mlp: error: --zero conflicts with --config" <<<"$out" || { echo "FAILED: --zero with --config: $out"; exit 1; }

# What a run shows: a progress line every --log-every steps with MFU and ETA, a summary,
# and --metrics: a header line, then one line a step with every rank's memory.
"$mpiexec" -n 2 "$mlp" --zero 2 --steps 4 --log-every 2 --metrics "$work/metrics.jsonl" >"$work/progress.log"
cat "$work/progress.log"
[ "$(grep -c '^step ' "$work/progress.log")" = 2 ] || { echo "FAILED: --log-every 2 over 4 steps"; exit 1; }
grep -q '^step    4/4 .*MFU [0-9.]*%.*mem .* MiB (rank [01]).*ETA 0m00s' "$work/progress.log" ||
  { echo "FAILED: the progress line lacks MFU, memory or ETA"; exit 1; }
grep -q '^summary: 4 steps' "$work/progress.log" || { echo "FAILED: no summary"; exit 1; }
python3 - "$work/metrics.jsonl" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
h = lines[0]["header"]
assert h["layout"] == {"tp": 1, "dp": 2, "pp": 1} and h["policies"]["sharding"] == "zero2", h
steps = lines[1:]
assert [s["step"] for s in steps] == [1, 2, 3, 4], steps
for s in steps:
    assert len(s["ranks"]) == 2 and all(r["peak_rss_bytes"] > 0 and r["memory_bytes"] > 0 for r in s["ranks"]), s
    assert 0 < s["mfu"] < 1, s
print("metrics: header and", len(steps), "steps")
PY
# scripts/plot draws the metrics file: three PNGs, or SVGs on request.
plot=$(dirname "$0")/../../scripts/plot
"$plot" "$work/metrics.jsonl" --out "$work/plots" >"$work/plot.log"
for f in loss throughput memory; do
  grep -q 'P   N   G' <<<"$(head -c 8 "$work/plots/$f.png" | od -An -c)" || { echo "FAILED: $f.png is not a PNG"; exit 1; }
done
"$plot" "$work/metrics.jsonl" --out "$work/plots" --format svg >/dev/null
grep -q "<svg" "$work/plots/loss.svg" || { echo "FAILED: loss.svg is not an SVG"; exit 1; }
help=$("$plot" --help) && grep -q "^usage: scripts/plot" <<<"$help" || { echo "FAILED: plot --help"; exit 1; }
set +e
"$plot" "$work/metrics.jsonl" --bogus 2>/dev/null; rc=$?
"$plot" "$work/progress.log" 2>"$work/plot_bad.log"; rc_bad=$?
set -e
[ $rc = 2 ] || { echo "FAILED: plot with a bad option exited $rc, not 2"; exit 1; }
[ $rc_bad = 1 ] && grep -q "is it a --metrics file" "$work/plot_bad.log" || { echo "FAILED: plot of a non-metrics file exited $rc_bad"; exit 1; }

# --trace: one Chrome trace of both ranks, with a track per kind of work and communicator.
"$mpiexec" -n 2 "$mlp" --zero 2 --steps 3 --micro-batches 2 --trace "$work/trace.json" --save "$work/traced" \
  --export "$work/traced.safetensors" >"$work/trace.log"
grep -q "^trace: [0-9]* events in $work/trace.json" "$work/trace.log" || { echo "FAILED: no trace line"; exit 1; }
python3 - "$work/trace.json" <<'PY'
import json, sys, collections
t = json.load(open(sys.argv[1]))["traceEvents"]
procs = {e["pid"]: e["args"]["name"] for e in t if e["name"] == "process_name"}
assert procs == {0: "rank 0", 1: "rank 1"}, procs
tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in t if e["name"] == "thread_name"}
for r in (0, 1):
    names = {n for (p, _), n in tracks.items() if p == r}
    assert {"compute", "optimizer", "data", "checkpoint", "comm data", "comm world"} <= names, names
x = [e for e in t if e["ph"] == "X"]
for e in x:
    assert e["cat"] == tracks[(e["pid"], e["tid"])] and e["dur"] >= 0, e
steps, micro = 3, 2
ops = {}
for r in (0, 1):
    mine = [e for e in x if e["pid"] == r]
    count = collections.Counter(e["name"] for e in mine)
    layers = [n[: -len(" forward")] for n in count if n.endswith(" forward")]
    assert len(layers) >= 3, count
    for l in layers:  # every layer forward and backward once per micro-batch
        assert count[l + " forward"] == count[l + " backward"] == steps * micro, (l, count)
    step_events = sorted((e for e in mine if e["name"].startswith("step ")), key=lambda e: e["ts"])
    assert [e["name"] for e in step_events] == ["step 1", "step 2", "step 3"], step_events
    for e in mine:  # a layer's event lies inside its step's
        if e["name"].endswith(("forward", "backward")):
            assert any(s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1e-3 for s in step_events), e
    assert count["adamw"] == steps and count["batch"] == steps, count
    saves = [e for e in mine if e["cat"] == "checkpoint"]
    assert any(e["name"].startswith("save ") for e in saves) and any(e["name"].startswith("export ") for e in saves)
    rs = [e for e in mine if e["name"].startswith("reduce_scatter #")]
    assert rs and all(e["args"]["comm"] == "data" and e["args"]["bytes"] > 0 for e in rs), rs[:3]
    # Every collective on the communicator while tracing, numbered without gaps.
    seqs = sorted(e["args"]["seq"] for e in mine if e["cat"] == "comm data" and "seq" in e["args"])
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs[:10]
    ops[r] = [(e["args"]["seq"], e["name"], e["args"]["bytes"]) for e in mine if e["cat"] == "comm data"]
assert sorted(ops[0]) == sorted(ops[1]), "the ranks' collectives differ"
print("trace:", len(x), "events;", sorted({n for n in tracks.values()}))
PY

# The memory report is the truth (docs/decisions/0005-the-memory-report-is-the-truth.md): a 29.9 M-param ZeRO-3 run with an export
# peaks, on every rank, within 10 % of its report above what the process held before the
# trainer existed (base_rss_bytes: program, libraries, MPI), plus 4 MiB for BLAS's and
# MPI's first-use buffers and MPI's all-reduce scratch, half the largest bucket (a 2048 x
# 2048 layer: 8 MiB); tests/mpi/memory.cpp measures both allowances.
"$mpiexec" -n 4 "$mlp" --zero 3 --hidden 2048 --layers 8 --features 256 --steps 3 --quiet \
  --export "$work/big.safetensors" --report "$work/big.json"
python3 - "$work/big.json" <<'PY'
import json, sys
mib = 2**20
r = json.load(open(sys.argv[1]))
for m in r["memory_per_rank"]:
    report, grew = m["report"]["total"], m["peak_rss_bytes"] - m["base_rss_bytes"]
    print(f"rank {m['rank']}: report {report / mib:.1f} MiB, peak {m['peak_rss_bytes'] / mib:.1f} MiB "
          f"(base {m['base_rss_bytes'] / mib:.1f}), grew {grew / report:.3f} x the report")
    assert grew <= 1.1 * report + 12 * mib, "peak beyond the report"
    assert grew >= 0.9 * report, "the report overstates the peak"
PY

# A CPU run maps no CUDA library: mlp links none, and --device cuda hands the run to
# mlp-cuda where the build has one (a GPU-less machine gets that program's device error).
if ldd "$mlp" | grep -E "libcuda|libcublas|libnccl"; then echo "FAILED: $mlp links CUDA libraries"; exit 1; fi
set +e
out=$("$mlp" --device cuda --steps 1 --quiet 2>&1)
rc=$?
set -e
echo "mlp --device cuda -> exit $rc: $(echo "$out" | head -1)"
if [ -x "$mlp-cuda" ]; then
  ! grep -q "no mlp-cuda next to" <<<"$out" || { echo "FAILED: mlp did not start mlp-cuda"; exit 1; }
  help=$("$mlp" --device cuda --help) && grep -q "usage: mpiexec -n N mlp" <<<"$help" || { echo "FAILED: mlp-cuda --help"; exit 1; }
else
  [ "$rc" = 2 ] && grep -q "no mlp-cuda next to this program" <<<"$out" || { echo "FAILED: $out"; exit 1; }
fi
echo "mlp_stages: ok"
