#!/usr/bin/env bash
# examples/ray/train.py as the Ray Train user runs it: a local Ray on loopback, 2 workers
# (Ray actors) each starting qwen2 with torchrun's variables, so the world forms over Gloo:
# the demo model fine-tunes with ZeRO-3 + offload, rank 0's report comes back to the
# driver, its loss is the mpiexec run's within 1e-6, and the Hugging Face export is written.
# The same fine-tune under scripts/launch saves, and resumes bitwise where the uninterrupted
# run ends; its checkpoint resumes under mpiexec too.
# Ray comes from scripts/deps --ray (scripts/test installs it in the background).
# usage: ray.sh QWEN2_BINARY MPIEXEC WORK_DIR SOURCE_DIR
set -euo pipefail
qwen2=$1 mpiexec=$2 work=$3 src=$4
rm -rf "$work" && mkdir -p "$work"
env_dir=${STRATA_RAY_ENV:-$HOME/.cache/strata/ray}
for _ in $(seq 1 600); do [ -e "$env_dir/.installing" ] || break; sleep 1; done
python=$env_dir/bin/python
"$python" -c "import ray" || { echo "FAILED: no Ray in $env_dir (scripts/deps --ray installs it)"; exit 1; }

help=$("$python" "$src/examples/ray/train.py" --help)
grep -q "usage: train.py" <<<"$help"
if "$python" "$src/examples/ray/train.py" --workers 0 -- true 2>"$work/bad.err"; then
  echo "FAILED: --workers 0 must fail"
  exit 1
else test $? -eq 2; fi

python3 "$src/examples/qwen2/byte_tokenizer.py" --out "$work/tok" >/dev/null
python3 "$src/examples/qwen2/prepare.py" --model "$work/tok" --out "$work/text" "$src"/examples/qwen2/data/*.txt >/dev/null
args=(--model random:demo --tokenizer "$work/tok" --data "$work/text.train.bin" --seq 64 --batch 8 --lr 3e-3
  --warmup 5 --zero 3 --offload --quiet)

cd "$work"
timeout 600 "$python" "$src/examples/ray/train.py" --workers 2 --report-out ray-report.json \
  -- "$qwen2" "${args[@]}" --steps 6 --report report.json --export hf | tee ray.log
grep -q "rank 0's report" ray.log || { echo "FAILED: the driver did not return rank 0's report"; exit 1; }
[ -f hf/config.json ] && [ -f hf/model.safetensors ] || { echo "FAILED: no Hugging Face export"; ls hf; exit 1; }
"$mpiexec" -n 2 "$qwen2" "${args[@]}" --steps 6 --report mpi.json
python3 - ray-report.json mpi.json <<'PY'
import json, sys
ray_run, mpi_run = (json.load(open(p)) for p in sys.argv[1:])
assert ray_run["launch"]["backend"] == "gloo" and ray_run["launch"]["processes"] == 2, ray_run["launch"]
a, b = ray_run["final_loss"], mpi_run["final_loss"]
print(f"Ray (Gloo) final loss {a!r}, mpiexec {b!r}")
assert abs(a - b) <= 1e-6 * (1 + abs(b)), (a, b)
assert ray_run["losses"][-1] < ray_run["losses"][0], ray_run["losses"]
PY

# Save and resume over Gloo (scripts/launch: torchrun's variables).
launch=$src/scripts/launch
"$launch" -n 2 -- "$qwen2" "${args[@]}" --steps 3 --save ckpt 2>/dev/null
"$launch" -n 2 -- "$qwen2" "${args[@]}" --steps 6 --load ckpt --report resumed.json 2>/dev/null
"$mpiexec" -n 2 "$qwen2" "${args[@]}" --steps 6 --load ckpt --report resumed-mpi.json
python3 - ray-report.json resumed.json resumed-mpi.json <<'PY'
import json, sys
straight, resumed, under_mpi = (json.load(open(p)) for p in sys.argv[1:])
assert resumed["weights_hash"] == straight["weights_hash"], (resumed["weights_hash"], straight["weights_hash"])
assert resumed["losses"] == straight["losses"][3:], (resumed["losses"], straight["losses"])
a, b = under_mpi["final_loss"], straight["final_loss"]
assert abs(a - b) <= 1e-6 * (1 + abs(b)), (a, b)
print("resume over Gloo: bitwise the uninterrupted run; the checkpoint resumes under mpiexec within 1e-6")
PY
