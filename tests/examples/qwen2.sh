#!/usr/bin/env bash
# The qwen2 program as a user runs it, on the demo's byte-level model and the repo's text:
# prepare.py's token and mask files train at 4 processes (ZeRO-3 + offload) with the loss
# falling; the report has its keys; --plan equals the trainer's memory report within 2 %
# at several layouts (recomputed layers too); a resumed run ends bitwise where an uninterrupted one does (also at
# another ZeRO stage, with the lr warming up across the save); the export reads back through
# the safetensors package; bad input fails before training with exit code 2, naming what is
# wrong.
# usage: qwen2.sh QWEN2_BINARY MPIEXEC WORK_DIR SOURCE_DIR
set -euo pipefail
qwen2=$1 mpiexec=$2 work=$3 src=$4
rm -rf "$work" && mkdir -p "$work"

help=$("$qwen2" --help)
grep -q "usage: mpiexec -n N qwen2" <<<"$help"
if "$qwen2" --bogus 1 2>"$work/bad.err"; then echo "a bad option must fail"; exit 1; else test $? -eq 2; fi
grep -q "qwen2: error: unknown option --bogus" "$work/bad.err" && grep -q "^usage:" "$work/bad.err"
# A CPU run maps no CUDA library; --device cuda is qwen2-cuda's, reached through qwen2.
if ldd "$qwen2" | grep -E "libcuda|libcublas|libnccl"; then echo "FAILED: $qwen2 links CUDA libraries"; exit 1; fi
if [ -x "$qwen2-cuda" ]; then
  help=$("$qwen2" --device cuda --help) && grep -q "usage: mpiexec -n N qwen2" <<<"$help" || { echo "FAILED: qwen2-cuda --help"; exit 1; }
  grep -q libcudart <<<"$(ldd "$qwen2-cuda")" || { echo "FAILED: qwen2-cuda does not link cudart"; exit 1; }
  if "$qwen2-cuda" --device cpu 2>"$work/cpu.err"; then echo "FAILED: qwen2-cuda ran --device cpu"; exit 1; fi
  grep -q "this executable runs on GPUs" "$work/cpu.err" || { echo "FAILED: $(cat "$work/cpu.err")"; exit 1; }
fi

python3 "$src/examples/qwen2/byte_tokenizer.py" --out "$work/tok" >/dev/null
python3 "$src/examples/qwen2/prepare.py" --model "$work/tok" --out "$work/text" "$src"/examples/qwen2/data/*.txt \
  "$src/examples/qwen2/data/qa.jsonl" >/dev/null
data=(--model random:demo --tokenizer "$work/tok" --data "$work/text.train.bin" --mask "$work/text.train.mask.bin")

# Training with a mask and validation; the loss falls.
"$mpiexec" -n 4 "$qwen2" "${data[@]}" --val "$work/text.val.bin" --val-mask "$work/text.val.mask.bin" --val-every 6 \
  --seq 64 --batch 8 --steps 12 --lr 3e-3 --zero 3 --offload --quiet --export "$work/hf" --report "$work/train.json"

# Plan against report: the same layout options, --plan first.
layouts=("--zero 0" "--zero 3 --precision bf16" "--tp 2 --zero 1 --micro-batches 2" "--pp 2 --zero 2 --schedule gpipe --micro-batches 2"
  "--zero 3 --offload --recompute" "--pp 2 --zero 1 --micro-batches 2 --recompute")
i=0
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086
  "$qwen2" --plan --world 4 "${data[@]}" --seq 64 --batch 8 $l --report "$work/plan$i.json" >"$work/plan$i.txt"
  # shellcheck disable=SC2086
  "$mpiexec" -n 4 "$qwen2" "${data[@]}" --seq 64 --batch 8 --steps 2 $l --quiet --report "$work/run$i.json"
  i=$((i + 1))
done

# Resume: 3 steps, save, load, 3 more == 6 steps straight; loading at another ZeRO stage too.
# The lr warms up over 5 steps, so a schedule resumed a step off changes the later losses.
common=("${data[@]}" --seq 64 --batch 8 --lr 3e-3 --warmup 5 --shuffle 5 --quiet)
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 3 --steps 6 --report "$work/straight.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 3 --steps 3 --save "$work/ckpt"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 3 --steps 6 --load "$work/ckpt" --report "$work/resumed.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 1 --steps 6 --load "$work/ckpt" --report "$work/resharded.json"
# The tied head: at one stage it shares the embedding's piece of the shard, across two stages
# it is a copy of its own; a checkpoint of either loads at the other.
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --pp 2 --zero 1 --steps 6 --load "$work/ckpt" --report "$work/to_pp.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --pp 2 --zero 1 --steps 6 --report "$work/pp_straight.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --pp 2 --zero 1 --steps 3 --save "$work/ckpt_pp"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 3 --steps 6 --load "$work/ckpt_pp" --report "$work/from_pp.json"
# ZeRO-0's master holds the tied head once too (at the embedding's place): its checkpoint
# resumes bitwise, at ZeRO-0 and at ZeRO-3, and a ZeRO-3 checkpoint loads at ZeRO-0.
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 0 --steps 3 --save "$work/ckpt0"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 0 --steps 6 --load "$work/ckpt0" --report "$work/z0_resumed.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 3 --steps 6 --load "$work/ckpt0" --report "$work/z0_to_z3.json"
"$mpiexec" -n 4 "$qwen2" "${common[@]}" --zero 0 --steps 6 --load "$work/ckpt" --report "$work/z3_to_z0.json"

# Hugging Face's DeepSpeed templates as they are: every "auto" filled from the options.
for t in hf_zero2_auto hf_zero3_auto; do
  # --warmup 0 fills the "auto" warmup, which DeepSpeed's WarmupLR reads as 1: no conflict.
  "$mpiexec" -n 4 "$qwen2" "${data[@]}" --seq 64 --batch 8 --steps 2 --lr 3e-3 --warmup 0 --quiet \
    --config "$src/tests/data/configs/$t.json" >"$work/$t.out"
  grep -q '"auto" filled by the program: .*optimizer.params.lr' "$work/$t.out"
  grep -q '"lr":0.003,' "$work/$t.out"
done
# The template with the file's own tensor-parallel size: the micro batch its "auto" leaves
# comes from the file's data-parallel size (8 rows / 2 data-parallel ranks = 4 a rank).
python3 - "$src/tests/data/configs/hf_zero2_auto.json" "$work/hf_tp2.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["strata"] = {"tensor_parallel_size": 2}
json.dump(c, open(sys.argv[2], "w"))
PY
"$mpiexec" -n 4 "$qwen2" "${data[@]}" --seq 64 --batch 8 --steps 1 --lr 3e-3 --quiet --config "$work/hf_tp2.json" \
  >"$work/hf_tp2.out"
grep -q '"train_micro_batch_size_per_gpu":4,' "$work/hf_tp2.out" || { cat "$work/hf_tp2.out"; exit 1; }
# No optimizer or scheduler section: the program's lr, weight decay and warmup decide, as
# the Hugging Face Trainer's arguments do, and the config printed says so.
echo '{"train_batch_size": "auto", "zero_optimization": {"stage": 2}}' >"$work/bare.json"
"$qwen2" "${data[@]}" --seq 64 --batch 8 --steps 1 --lr 3e-3 --weight-decay 0.05 --warmup 3 --quiet \
  --config "$work/bare.json" >"$work/bare.out"
for want in '"lr":0.003,' '"weight_decay":0.05' '"type":"WarmupLR"' '"warmup_num_steps":3,' '"warmup_type":"log"' \
  '"auto" filled by the program: .*optimizer.params.lr'; do
  grep -q -- "$want" "$work/bare.out" || { echo "FAILED: no $want in:"; cat "$work/bare.out"; exit 1; }
done

# Bad input, each an error before training (exit 2).
bad() {
  local says=$1
  shift
  local rc=0
  "$qwen2" "$@" >"$work/bad.out" 2>&1 || rc=$?
  [ "$rc" = 2 ] || { echo "FAILED: exit code $rc, not 2: $*"; cat "$work/bad.out"; exit 1; }
  grep -q -- "$says" "$work/bad.out" || { echo "expected '$says' in:"; cat "$work/bad.out"; exit 1; }
}
bad "is not in \[1, max_position_embeddings = 512\]" "${data[@]}" --seq 1024 --steps 1
bad "must be a positive multiple of data-parallel ranks x micro-batches" "${data[@]}" --seq 64 --batch 5 --micro-batches 2 --steps 1
# Counts out of range are named before anything divides by them or cuts them to an int.
bad "error: --micro-batches 0 is less than 1" "${data[@]}" --seq 64 --micro-batches 0 --steps 1
bad "error: --tp 0 is less than 1" "${data[@]}" --seq 64 --tp 0 --steps 1
bad "error: --pp 4294967297 is too large (at most 2147483647)" "${data[@]}" --seq 64 --pp 4294967297 --steps 1
bad "error: --bucket -5 is less than 1" "${data[@]}" --seq 64 --bucket -5 --steps 1
# Where the run's outputs cannot go, it says so before the first step.
bad "error: --report $work/none/r.json: cannot be written there" "${data[@]}" --seq 64 --steps 1 --report "$work/none/r.json"
bad "error: --tokenizer $work: none of a Hugging Face tokenizer's files is there" "${data[@]}" --tokenizer "$work" --steps 1
python3 - "$work/big.bin" <<'PY'
import struct, sys
tokens = [1, 2, 300, 4] * 40
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
    f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
bad "big.bin: token 300 at offset 1028 (token 2) is not below the model's vocab_size 258" --model random:demo \
  --data "$work/big.bin" --seq 16 --batch 2 --steps 1
# A config's mistakes and conflicts, named before training.
echo '{"train_batch_size": 8, "strata": {"tensor_parallel_size": 65536, "pipeline_parallel_size": 65536}}' \
  >"$work/huge_grid.json"
bad "config: tensor x pipeline = 65536 x 65536 does not divide 1 processes" "${data[@]}" --seq 64 --steps 1 \
  --config "$work/huge_grid.json"
echo '{"train_batch_size": 8, "zero_optimization": {"stage": 3}, "zero_optimization": {"stage": 1}}' >"$work/twice.json"
bad "zero_optimization is given twice" "${data[@]}" --seq 64 --steps 1 --config "$work/twice.json"
echo '{"train_batch_size": 8, "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 10}}}' \
  >"$work/warmup10.json"
bad "--warmup 3 conflicts with --config $work/warmup10.json, whose scheduler.params.warmup_num_steps is 10" \
  "${data[@]}" --seq 64 --steps 1 --warmup 3 --config "$work/warmup10.json"
echo '{"train_batch_size": 8, "strata": {"seed": 7}}' >"$work/seed7.json"
bad "--seed 5 conflicts with --config $work/seed7.json, whose strata.seed is 7" "${data[@]}" --seq 64 --steps 1 \
  --seed 5 --config "$work/seed7.json"

python3 - "$work" <<'PY'
import json, os, sys
work = sys.argv[1]
r = json.load(open(os.path.join(work, "train.json")))
for key in ("losses", "val_losses", "tokens_per_s", "memory", "weights_hash", "memory_per_rank", "layout"):
    assert key in r, f"the report lacks {key}"
losses = r["losses"]
assert len(losses) == 12 and losses[-1] < losses[0] - 0.5, f"the loss does not fall: {losses}"
assert [v["step"] for v in r["val_losses"]] == [6, 12], r["val_losses"]
assert r["tokens_per_s"] > 0
print(f"train: loss {losses[0]:.3f} -> {losses[-1]:.3f}, validation {r['val_losses'][-1]['loss']:.3f}")

# --plan against the trainer's report, every category of every rank's stage within 2 %:
# the union of both sides' categories, each on both. The report lists a fixed set of
# categories (0 where the trainer has none); the plan leaves out one that does not apply
# (param_shard, offload_staging on the host), which the report must then hold at 0. Any
# other category on one side only fails, and so does a stage without the main ones.
summaries = {"compute_space", "host_offloaded", "layers"}  # the plan's, not categories
for i in range(6):
    plan = json.load(open(os.path.join(work, f"plan{i}.json")))
    run = json.load(open(os.path.join(work, f"run{i}.json")))
    zero = str(run["layout"]["zero_stage"])
    stages = plan["zero"][zero]
    assert len(run["memory_per_rank"]) == 4, f"layout {i}: {len(run['memory_per_rank'])} ranks reported, not 4"
    for rank in run["memory_per_rank"]:
        where = f"layout {i} rank {rank['rank']}"
        want = stages[rank["pp_rank"]]
        got = rank["report"]
        assert summaries <= set(want), f"{where}: the plan lacks {summaries - set(want)}"
        planned = set(want) - summaries
        for cat in ("params", "grads", "master", "optimizer_states", "comm_buffers", "activations", "total"):
            assert cat in planned and cat in got, f"{where}: {cat} missing from the {'report' if cat in planned else 'plan'}"
        for cat in sorted(planned | set(got)):
            assert cat in got, f"{where}: {cat} planned ({want[cat]}) but not in the report"
            if cat not in planned:
                assert got[cat] == 0, f"{where}: {cat} reported ({got[cat]}) but not planned"
                continue
            p, g = want[cat], got[cat]
            assert abs(p - g) <= 0.02 * max(g, 1), f"{where}: {cat} planned {p}, reported {g}"
    print(f"plan {i} ({run['layout']}): every rank's report within 2 % of the plan, "
          f"total {stages[0]['total'] / 2**20:.2f} MiB on stage 0")

straight = json.load(open(os.path.join(work, "straight.json")))
resumed = json.load(open(os.path.join(work, "resumed.json")))
resharded = json.load(open(os.path.join(work, "resharded.json")))
assert len(straight["losses"]) == 6 and len(resumed["losses"]) == 3, (straight["losses"], resumed["losses"])
assert resumed["weights_hash"] == straight["weights_hash"], (resumed["weights_hash"], straight["weights_hash"])
assert resumed["losses"] == straight["losses"][3:], (resumed["losses"], straight["losses"])
assert resharded["weights_hash"] == straight["weights_hash"], "a ZeRO-3 checkpoint resumed at ZeRO-1"
print("resume: bitwise the uninterrupted run, at ZeRO-3 and resharded to ZeRO-1")
for name in ("z0_resumed", "z0_to_z3", "z3_to_z0"):
    got = json.load(open(os.path.join(work, f"{name}.json")))
    assert got["weights_hash"] == straight["weights_hash"], (name, got["weights_hash"], straight["weights_hash"])
    assert got["losses"] == straight["losses"][3:], (name, got["losses"], straight["losses"])
print("resume: a ZeRO-0 checkpoint (the tied head held once) resumes bitwise at ZeRO-0 and ZeRO-3, and back")
# The same weights at another layout: the losses differ at most by the order of their sums.
for name, ref in (("to_pp", straight), ("from_pp", json.load(open(os.path.join(work, "pp_straight.json"))))):
    got = json.load(open(os.path.join(work, f"{name}.json")))["losses"]
    assert abs(got[0] - ref["losses"][3]) <= 1e-5 * ref["losses"][3], (name, got, ref["losses"])
print("tied head: a shared-piece checkpoint loads across pipeline stages, and back")

# The export through the safetensors package: every tensor of the config, transformers' names.
from safetensors.numpy import load_file
cfg = json.load(open(os.path.join(work, "hf", "config.json")))
t = load_file(os.path.join(work, "hf", "model.safetensors"))
D, V, L = cfg["hidden_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
assert cfg["model_type"] == "qwen2" and t["model.embed_tokens.weight"].shape == (V, D)
assert "lm_head.weight" not in t  # tied, as transformers saves it
assert len(t) == 2 + L * 12, sorted(t)
assert os.path.exists(os.path.join(work, "hf", "tokenizer.json"))
print(f"export: {len(t)} tensors read by safetensors")
PY
echo "qwen2: ok"
