#!/usr/bin/env bash
# MLflow as a user sees it: a real `mlflow server` (sqlite backend, artifacts served, on
# loopback in WORK_DIR), qwen2 trained at 2 processes with --mlflow and a DeepSpeed
# config; MLflow's own client reads the run back: FINISHED, the layout/policy/option and
# ds_config params, every metric of every step equal to the --metrics file's, the
# exported Hugging Face directory among the artifacts. A run that fails after it started
# is FAILED; an unreachable server is a warning and training goes on.
# usage: mlflow.sh QWEN2_BINARY MPIEXEC WORK_DIR SOURCE_DIR   (mlflow: scripts/deps --mlflow)
set -euo pipefail
qwen2=$1 mpiexec=$2 work=$3 src=$4
env_dir=${STRATA_MLFLOW_ENV:-$HOME/.cache/strata/mlflow}
# scripts/test installs mlflow while it builds; wait for that install if it still runs.
for _ in $(seq 1 600); do [ -e "$env_dir/.installing" ] || break; sleep 1; done
[ -x "$env_dir/bin/mlflow" ] || { echo "mlflow.sh: no mlflow in $env_dir (scripts/deps --mlflow installs it)" >&2; exit 1; }
py=$env_dir/bin/python
rm -rf "$work" && mkdir -p "$work"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
uri=http://127.0.0.1:$port
# Its own process group: the server starts workers, and the trap ends them all.
setsid "$env_dir/bin/mlflow" server --host 127.0.0.1 --port "$port" --workers 1 \
  --backend-store-uri "sqlite:///$work/mlflow.db" --artifacts-destination "$work/artifacts" >"$work/server.log" 2>&1 &
server=$!
trap 'kill -- -$server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
for i in $(seq 1 240); do
  python3 -c "import urllib.request, sys; urllib.request.urlopen(sys.argv[1] + '/health', timeout=2)" "$uri" \
    2>/dev/null && break
  kill -0 $server 2>/dev/null || { echo "mlflow server exited:"; tail -20 "$work/server.log"; exit 1; }
  [ "$i" = 240 ] && { echo "mlflow server not up after 60 s"; tail -20 "$work/server.log"; exit 1; }
  sleep 0.25
done

python3 "$src/examples/qwen2/byte_tokenizer.py" --out "$work/tok" >/dev/null
python3 "$src/examples/qwen2/prepare.py" --model "$work/tok" --out "$work/text" "$src"/examples/qwen2/data/*.txt >/dev/null
data=(--model random:demo --tokenizer "$work/tok" --data "$work/text.train.bin" --seq 64 --batch 8 --lr 3e-3 --quiet)

"$mpiexec" -n 2 "$qwen2" "${data[@]}" --steps 5 --config "$src/tests/data/configs/hf_zero2_auto.json" \
  --export "$work/hf" --metrics "$work/run.jsonl" --mlflow "$uri" --experiment strata-ci --run-name trained
# Fails after the run started: the checkpoint's folder is a file.
touch "$work/not-a-dir"
if "$mpiexec" -n 2 "$qwen2" "${data[@]}" --steps 2 --save "$work/not-a-dir/ckpt" --mlflow "$uri" \
  --experiment strata-ci --run-name failed 2>"$work/failed.err"; then
  echo "FAILED: a save into a file's path succeeded"
  exit 1
fi
# Not an HTTP server: a usage error before anything starts.
if "$qwen2" "${data[@]}" --steps 1 --mlflow databricks 2>"$work/bad.err"; then echo "FAILED: --mlflow databricks"; exit 1; fi
grep -q "mlflow databricks: strata talks to a tracking server over HTTP" "$work/bad.err" ||
  { echo "FAILED: $(cat "$work/bad.err")"; exit 1; }
# MLFLOW_TRACKING_URI naming another kind of store: a note, and the run trains untracked.
MLFLOW_TRACKING_URI=databricks "$qwen2" "${data[@]}" --steps 1 2>"$work/env.err" >/dev/null
grep -q "strata: note: MLFLOW_TRACKING_URI=databricks is not an http(s) tracking server" "$work/env.err" ||
  { echo "FAILED: $(cat "$work/env.err")"; exit 1; }
# No server: a warning, and the metrics file has every step.
"$mpiexec" -n 2 "$qwen2" "${data[@]}" --steps 2 --metrics "$work/offline.jsonl" --mlflow "http://127.0.0.1:9" \
  2>"$work/offline.err"
grep -q "strata: warning: MLflow tracking server http://127.0.0.1:9 cannot be reached" "$work/offline.err" ||
  { echo "FAILED: no warning for an unreachable server:"; cat "$work/offline.err"; exit 1; }
[ "$(grep -c '"step"' "$work/offline.jsonl")" = 2 ] || { echo "FAILED: offline metrics"; exit 1; }

"$py" - "$uri" "$work/run.jsonl" "$src/tests/data/configs/hf_zero2_auto.json" <<'PY'
import json, sys
from mlflow.tracking import MlflowClient

uri, metrics_file, config_file = sys.argv[1:4]
client = MlflowClient(tracking_uri=uri)
exp = client.get_experiment_by_name("strata-ci")
assert exp is not None, "no experiment strata-ci"
runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
assert set(runs) == {"trained", "failed"}, f"runs: {sorted(runs)}"
run = runs["trained"]
assert run.info.status == "FINISHED", run.info.status
assert runs["failed"].info.status == "FAILED", runs["failed"].info.status

def flatten(j, prefix=""):
    if isinstance(j, dict):
        for k, v in j.items():
            if not (k == "rank" and not isinstance(v, (dict, list))):
                yield from flatten(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(j, list):
        for i, v in enumerate(j):
            yield from flatten(v, f"{prefix}.{i}" if prefix else str(i))
    else:
        yield prefix, j

lines = [json.loads(l) for l in open(metrics_file)]
header, steps = lines[0]["header"], lines[1:]
params = run.data.params
expected = dict(flatten(header))
expected.update({f"ds_config.{k}": v for k, v in flatten(json.load(open(config_file)))})
for k, v in expected.items():
    want = v if isinstance(v, str) else json.dumps(v)
    assert k in params, f"param {k} missing"
    got = params[k]
    if not isinstance(v, str) and isinstance(v, (int, float)) and not isinstance(v, bool):
        assert float(got) == float(v), f"param {k}: {got} != {v}"
    else:
        assert got == want, f"param {k}: {got!r} != {want!r}"
assert params["layout.dp"] == "2" and params["policies.sharding"] == "zero2+offload", params
assert len(steps) == 5
keys = set()
for s in steps:
    keys |= {k for k, v in flatten(s) if k != "step" and isinstance(v, (int, float))}
for k in sorted(keys):
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, k)}
    want = {s["step"]: float(dict(flatten(s))[k]) for s in steps}
    assert history == want, f"metric {k}: {history} != {want}"
for k in ("loss", "lr", "grad_norm", "tokens_per_s", "ranks.1.memory_bytes"):
    assert k in keys, f"metric {k} not logged"
files = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
for f in ("model/config.json", "model/model.safetensors", "model/tokenizer.json"):
    assert f in files, f"artifact {f} missing: {sorted(files)}"
print(f"mlflow: run FINISHED with {len(params)} params, {len(keys)} metrics x {len(steps)} steps, "
      f"{len(files)} artifacts; the failed run FAILED")
PY
