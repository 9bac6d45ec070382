#!/usr/bin/env bash
# The gpt example as a user runs it: one process and a tp 2 x pp 2 grid (and the other
# 4-process layouts) report the same losses within 1e-5 relative; reports carry the keys.
# usage: gpt_layouts.sh GPT_BINARY MPIEXEC WORK_DIR
set -euo pipefail
gpt=$1 mpiexec=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
common=(--steps 6 --micro-batches 4 --batch 8 --quiet)
"$gpt" "${common[@]}" --report "$work/one.json"
"$mpiexec" -n 4 "$gpt" "${common[@]}" --tp 2 --pp 2 --report "$work/tp2pp2.json"
"$mpiexec" -n 4 "$gpt" "${common[@]}" --pp 2 --zero 2 --schedule gpipe --report "$work/pp2dp2.json"
"$mpiexec" -n 4 "$gpt" "${common[@]}" --tp 2 --zero 3 --report "$work/tp2dp2.json"
python3 - "$work" <<'PY'
import json, sys, os
work = sys.argv[1]
one = json.load(open(os.path.join(work, "one.json")))
assert len(one["losses"]) == 6, f"one process: {len(one['losses'])} losses for --steps 6"
for name in ("tp2pp2", "pp2dp2", "tp2dp2"):
    r = json.load(open(os.path.join(work, name + ".json")))
    for key in ("final_loss", "weights_hash", "skipped_steps", "memory", "pipeline_idle_fraction"):
        assert key in r, f"{name}: report lacks {key}"
    assert len(r["losses"]) == len(one["losses"]), f"{name}: {len(r['losses'])} losses, one process {len(one['losses'])}"
    for a, b in zip(r["losses"], one["losses"]):
        assert abs(a - b) <= 1e-5 * abs(b), f"{name}: loss {a} vs one process {b}"
    print(f"{name}: losses match one process; final {r['final_loss']:.6f}, idle fraction {r['pipeline_idle_fraction']:.3f}")
PY
echo "gpt_layouts: ok"
