#!/usr/bin/env python3
"""Writes scripts/bench's markdown from the outputs of its runs.

    bench_report.py WORK OUT

WORK holds meta.json (the command, machine, commit, date, mode, what was left out) and
runs.jsonl (one line per run: id, command, rc, seconds, output file, or skipped and why).
Each benchmark's output is parsed into a markdown table; the exit status is 1 when a run
failed or its output did not parse (each is named on stderr), 0 otherwise. Called after
every run, so the file grows as the benchmarks finish.
"""
import json
import os
import re
import statistics
import sys


class ParseError(Exception):
    pass


def num(s):
    return float(s.replace(",", ""))


def fmt(x, digits=0):
    return f"{x:,.{digits}f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def lines_of(text, prefix):
    return [l for l in text.splitlines() if l.startswith(prefix)]


# --- parsers: each takes a run's output and returns a structure, or raises ParseError ---


def parse_train(text):
    """bench/train: model size dim layers heads seq vocab params batch step-ms tokens/s GFLOP/s GEMM%."""
    rows = {}
    for l in text.splitlines():
        f = l.split()
        if len(f) == 13 and f[0] in ("gpt", "qwen2") and f[1] in ("S", "M", "L"):
            rows[(f[0], f[1])] = dict(dim=int(f[2]), layers=int(f[3]), heads=int(f[4]), seq=int(f[5]),
                                      vocab=int(f[6]), params=int(num(f[7])), batch=int(f[8]), ms=num(f[9]),
                                      tokens=num(f[10]), gflops=num(f[11]), gemm=num(f[12]))
    if not rows:
        raise ParseError("no 'gpt|qwen2 S|M|L ...' rows")
    head = lines_of(text, "# bench/train")
    return {"rows": rows, "head": head[0][2:] if head else ""}


def parse_torch_train(text):
    """bench/peers/torch_train.py: size dim layers heads seq vocab params batch step-ms tokens/s GFLOP/s."""
    rows = {}
    for l in text.splitlines():
        f = l.split()
        if len(f) == 11 and f[0] in ("S", "M", "L", "G"):
            rows[f[0]] = dict(params=int(f[6]), tokens=num(f[9]))
    if not rows:
        raise ParseError("no 'S|M|L|G ...' rows")
    head = lines_of(text, "# torch_train")
    memory = re.search(r"peak allocated device memory ([\d,]+) MiB", text)
    return {"rows": rows, "head": head[0][2:] if head else "", "memory": memory[1] if memory else None}


def parse_json_tail(text):
    """bench/peers/qwen2_finetune.py: its last line is a JSON object with tokens_per_s."""
    for l in reversed(text.splitlines()):
        if l.startswith("{"):
            try:
                r = json.loads(l)
            except ValueError:
                break
            if "tokens_per_s" in r:
                return r
    raise ParseError("no JSON line with tokens_per_s")


def parse_zero(text):
    """bench/zero: stage (may hold '+') and 11 numbers and the weights hash."""
    rows = []
    for l in text.splitlines():
        f = l.split()
        if len(f) >= 13 and re.fullmatch(r"[0-9a-f]{16}", f[-1]):
            try:
                vals = [num(x) for x in f[-12:-1]]
            except ValueError:
                continue
            rows.append((" ".join(f[:-12]), vals, f[-1]))
    if not rows:
        raise ParseError("no stage rows ending in a weights hash")
    head = lines_of(text, "# bench/zero")
    return {"rows": rows, "head": head[0][2:] if head else ""}


def parse_optimizer(text):
    """bench/optimizer: its own markdown rows | 2^k | threads | kernel | ms | Gparam/s | GB/s | vs triad | time/fp32 |."""
    rows = []
    for l in text.splitlines():
        m = re.match(r"\| 2\^(\d+) \| (\d+) \| ([^|]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([^|]+) \|", l)
        if m:
            rows.append(dict(log2=int(m[1]), threads=int(m[2]), kernel=m[3].strip(), gbs=float(m[6]),
                             vs_triad=float(m[7]), vs_fp32=m[8].strip()))
    if not rows:
        raise ParseError("no '| 2^k | ...' rows")
    return {"rows": rows, "targets": lines_of(text, "target"), "head": (lines_of(text, "bench/optimizer") or [""])[0]}


def parse_collectives(text):
    """bench/collectives (host or --device cuda): '# op' blocks of rows, and each op's median ratio line."""
    ops, op = {}, None
    summary = {}
    for l in text.splitlines():
        m = re.match(r"# (all_reduce|reduce_scatter|all_gather|broadcast)$", l)
        if m:
            op = m[1]
            ops[op] = []
            continue
        m = re.match(r"# (\w+): median busbw ratio [^:]*: ([\d.]+) \(lowest ([\d.]+)\)", l)
        if m:
            summary[m[1]] = (float(m[2]), float(m[3]))
            continue
        if op and re.match(r"\s+\d+\s+\d+ \|", l):
            parts = [p.split() for p in l.split("|")]
            ops[op].append(parts)
    if not any(ops.values()):
        raise ParseError("no collective rows")
    return {"ops": ops, "summary": summary,
            "breakdown": text.split("# per-call breakdown", 1)[1] if "# per-call breakdown" in text else ""}


def parse_pipeline(text):
    """bench/pipeline: 'p = N' blocks of 'm ideal 1f1b gpipe' rows, then the peak activations per stage."""
    bubble, memory, p, in_memory = {}, {}, None, False
    for l in text.splitlines():
        m = re.match(r"p = (\d+)$", l)
        if m:
            p, in_memory = int(m[1]), False
            bubble[p], memory[p] = [], []
            continue
        if l.startswith("peak activation MiB"):
            in_memory = True
            continue
        f = l.split()
        if p and f and all(re.fullmatch(r"[\d.]+", x) for x in f):
            if in_memory and len(f) == 3:
                memory[p].append((int(f[0]), float(f[1]), float(f[2])))
            elif not in_memory and len(f) == 4:
                bubble[p].append((int(f[0]), float(f[1]), float(f[2]), float(f[3])))
    if not any(bubble.values()):
        raise ParseError("no 'p = N' block of 'm ideal 1f1b gpipe' rows")
    head = lines_of(text, "# bench/pipeline")
    return {"bubble": bubble, "memory": memory, "head": head[0][2:] if head else ""}


def parse_trace(text):
    """bench/trace: 'off ms 1.000' and 'on ms ratio' rows, and the traced step's events."""
    rows = {}
    for l in text.splitlines():
        f = l.split()
        if len(f) == 3 and f[0] in ("off", "on"):
            rows[f[0]] = (num(f[1]), num(f[2]))
    if set(rows) != {"off", "on"}:
        raise ParseError("no 'off' and 'on' rows")
    notes = [l[2:] for l in lines_of(text, "# ") if not l.startswith("# bench/trace")]
    head = lines_of(text, "# bench/trace")
    return {"rows": rows, "notes": notes, "head": head[0][2:] if head else ""}


def parse_finetune(text):
    """bench/finetune: a markdown table of ranks' memory, the strata line, and the PyTorch lines when run."""
    rows = [l for l in text.splitlines() if re.match(r"\| \d", l)]
    strata = re.search(r"^strata: ([\d.]+) tokens/s \(median step\), peak resident ([\d,]+) MiB over all ranks, "
                       r"losses (\[.*\])", text, re.M)
    if not rows or not strata:
        raise ParseError("no rank rows or no 'strata: N tokens/s' line")
    peer = re.search(r"^PyTorch (\S+) \((\d+) threads, (\d+) params\): ([\d.]+) tokens/s, peak resident ([\d,]+) MiB, "
                     r"losses (\[.*\])", text, re.M)
    ratio = re.search(r"^ratio strata / PyTorch: tokens/s ([\d.]+), peak memory ([\d.]+)", text, re.M)
    layout = re.search(r"^strata (zero.*)$", text, re.M)
    return {"rows": rows, "tokens": float(strata[1]), "peak": strata[2], "losses": strata[3],
            "peer": peer.groups() if peer else None, "ratio": ratio.groups() if ratio else None,
            "layout": layout[1] if layout else ""}


def parse_device_train(text):
    """bench/train --device cuda: 'model layers dim heads seq vocab params batch ms tokens/s TFLOP/s MFU loss'."""
    rows = {}
    for l in text.splitlines():
        f = l.split()
        if len(f) == 13 and f[0] in ("gpt", "qwen2"):
            rows[f[0]] = {"tokens": num(f[9]), "tflops": f[10], "mfu": f[11], "params": int(f[6]), "row": l}
    if not rows:
        raise ParseError("no 'gpt|qwen2 ...' row")
    return rows


def parse_device_optimizer(text):
    rows = [l for l in text.splitlines() if re.match(r"\s+\d+\s+\d+ \|", l)]
    if not rows:
        raise ParseError("no 'log2 params | ...' rows")
    return {"targets": [l[2:] for l in lines_of(text, "# target")]}


PARSERS = {
    "train": parse_train, "torch_train": parse_torch_train, "qwen2_peer": parse_json_tail, "zero": parse_zero,
    "optimizer": parse_optimizer, "collectives": parse_collectives, "pipeline": parse_pipeline, "trace": parse_trace,
    "finetune": parse_finetune, "device_train": parse_device_train, "device_optimizer": parse_device_optimizer,
    "device_collectives": parse_collectives,
}


# --- rounds: scripts/bench runs the host training table in rounds, round k > 1 as ID.rK ---


def median_of(values):
    return statistics.median(values)


def merge_train(results):
    rows = {}
    for key, first in results[0]["rows"].items():
        same = [r["rows"][key] for r in results if key in r["rows"]]
        rows[key] = dict(first, **{f: median_of([x[f] for x in same]) for f in ("ms", "tokens", "gflops", "gemm")})
    return dict(results[0], rows=rows)


def merge_torch_train(results):
    rows = {}
    for key, first in results[0]["rows"].items():
        rows[key] = dict(first, tokens=median_of([r["rows"][key]["tokens"] for r in results if key in r["rows"]]))
    return dict(results[0], rows=rows)


def merge_json_tail(results):
    return dict(results[0], tokens_per_s=median_of([r["tokens_per_s"] for r in results]))


MERGE = {"train": merge_train, "torch_train": merge_torch_train, "qwen2_peer": merge_json_tail}


def merge_rounds(runs, parsed):
    """Folds each ID.rK into ID: every timing the median over the rounds that parsed (a round
    that failed is among the problems already); ID's "rounds" says how many."""
    more = {}
    for k in [k for k in parsed if re.search(r"\.r\d+$", k)]:
        more.setdefault(re.sub(r"\.r\d+$", "", k), []).append(parsed.pop(k))
    for base, results in more.items():
        if base in parsed and runs[base]["parser"] in MERGE:
            parsed[base] = dict(MERGE[runs[base]["parser"]]([parsed[base]] + results), rounds=1 + len(results))


# --- sections ---


def cmd(run):
    return f"`{run['command']}`"


def section_train(runs, parsed, out):
    t = parsed.get("train")
    if not t:
        return
    eager, sdpa = parsed.get("torch_eager"), parsed.get("torch_sdpa")
    out.append("## Training speed on the host\n")
    out.append(f"{cmd(runs['train'])} ({t['head']})" + (
        f", next to {cmd(runs['torch_eager'])} and {cmd(runs['torch_sdpa'])}" if eager and sdpa else "") + ". "
               "One process, fp32, AdamW, the global batch in 2 micro-batches; GFLOP/s counts 6 per param per token "
               "(lookup tables left out) plus attention's 12 · layers · dim · seq; GEMM % is strata's share of the "
               "step inside `cblas_sgemm`." + (
                   f" Each tokens/s is the median of {t['rounds']} rounds, strata and its peers one after the other "
                   "in each round, and each ratio the ratio of the medians." if t.get("rounds", 1) > 1 else "") + "\n")
    header = ["size (dim/layers/heads/seq/vocab)", "params", "strata tokens/s", "GFLOP/s", "GEMM %"]
    if eager and sdpa:
        header += ["torch eager", "torch sdpa", "strata / eager", "strata / sdpa"]
    rows = []
    for size in "SML":
        r = t["rows"].get(("gpt", size))
        if not r:
            continue
        row = [f"{size} {r['dim']}/{r['layers']}/{r['heads']}/{r['seq']}/{r['vocab']}, batch {r['batch']}",
               fmt(r["params"]), fmt(r["tokens"]), fmt(r["gflops"], 1), fmt(r["gemm"], 1)]
        if eager and sdpa:
            e, s = eager["rows"].get(size), sdpa["rows"].get(size)
            row += [fmt(e["tokens"]) if e else "-", fmt(s["tokens"]) if s else "-",
                    f"{r['tokens'] / e['tokens']:.2f}" if e else "-", f"{r['tokens'] / s['tokens']:.2f}" if s else "-"]
        rows.append(row)
    if rows:
        out.append("gpt (the gpt example's model):\n")
        out.append(table(header, rows) + "\n")
    rows, peers = [], []
    for size in "SML":
        r = t["rows"].get(("qwen2", size))
        if not r:
            continue
        p = parsed.get(f"qwen2_peer_{size}")
        if p:
            peers.append(runs[f"qwen2_peer_{size}"])
        rows.append([f"{size} {r['dim']}/{r['layers']}/{r['heads']}/{r['seq']}/{r['vocab']}, batch {r['batch']}",
                     fmt(r["params"]), fmt(r["tokens"]), fmt(r["gflops"], 1), fmt(r["gemm"], 1)] +
                    ([fmt(p["tokens_per_s"]), f"{r['tokens'] / p['tokens_per_s']:.2f}"] if p else []))
    if rows:
        out.append("Qwen2 (grouped-query attention with 2 KV heads, the token embedding left out of the FLOPs)" +
                   (", next to transformers' `Qwen2ForCausalLM` (sdpa attention, the batch in one piece, the mean "
                    "over the steps after the first): " + ", ".join(cmd(r) for r in peers) if peers else "") + ":\n")
        h = ["size (dim/layers/heads/seq/vocab)", "params", "strata tokens/s", "GFLOP/s", "GEMM %"]
        if peers:
            h += ["transformers", "strata / transformers"]
        out.append(table(h, [r + ["-"] * (len(h) - len(r)) for r in rows]) + "\n")


def section_zero(runs, parsed, out):
    z = parsed.get("zero")
    if not z:
        return
    out.append("## ZeRO memory and bitwise-identical stages\n")
    out.append(f"{cmd(runs['zero'])} ({z['head']}). MiB per rank; report = all of `tr.memory()`, activations and "
               "I/O staging included; peak = the most-grown rank's measured resident peak, from before its trainer "
               "was built to after the weights hash.\n")
    rows = [[name] + [f"{v:.2f}" for v in vals] + [h] for name, vals, h in z["rows"]]
    out.append(table(["stage", "params", "grads", "master", "optim", "comm", "state", "offloaded", "report", "peak",
                      "step ms", "step vs replicated", "weights_hash"], rows) + "\n")
    hashes = {h for _, _, h in z["rows"]}
    out.append(f"Every stage's weights_hash: {'one, ' + next(iter(hashes)) if len(hashes) == 1 else 'DIFFERENT'}.\n")


def section_optimizer(runs, parsed, out):
    o = parsed.get("optimizer")
    if not o:
        return
    out.append("## Optimizer throughput\n")
    out.append(f"{cmd(runs['optimizer'])}: GB/s (in brackets: the ratio to a STREAM triad measured in the same run); "
               "bf16 and fp16 are mixed-precision AdamW's time over fp32 AdamW's.\n")
    cells = {}
    for r in o["rows"]:
        cells.setdefault((r["log2"], r["threads"]), {})[r["kernel"]] = r
    rows = []
    for (k, t), c in sorted(cells.items()):
        def gb(name, ratio=False):
            r = c.get(name)
            return "-" if not r else f"{r['gbs']:.1f}" + (f" ({r['vs_triad']:.2f})" if ratio else "")

        def times(name):
            r = c.get(name)
            return "-" if not r else r["vs_fp32"] + "×"

        rows.append([f"2^{k}", t, gb("triad"), gb("adamw fp32", True), gb("adamw naive std::sqrt", True),
                     gb("sgd momentum fp32"), gb("lion fp32"),
                     times("adamw bf16 mixed"), times("adamw fp16 mixed")])
    out.append(table(["params", "threads", "triad", "AdamW fp32", "naive std::sqrt loop", "SGD momentum", "Lion",
                      "bf16 time / fp32", "fp16 time / fp32"], rows) + "\n")
    if o["targets"]:
        out.append("\n".join(f"- {l}" for l in o["targets"]) + "\n")


def has_gloo(row):
    """A host collectives row split at '|': size, strata, raw MPI, ratio, and where the build has
    Gloo a fifth part, gloo's time, bus bandwidth and ratio to raw."""
    return len(row) > 4


def section_collectives(runs, parsed, out, key="collectives", device=False):
    c = parsed.get(key)
    if not c:
        return
    raw = "raw NCCL" if device else "raw MPI"
    out.append(f"{cmd(runs[key])}: " + ("median times (µs)" if device else "nccl-tests bus bandwidth (GB/s)")
               + f"; ratio = strata / {raw} bus bandwidth, each pair run back to "
               "back in the same run" + ("; gloo = strata's `gloo_comm` over the same processes" if not device and any(
                   has_gloo(r) for rows in c["ops"].values() for r in rows) else "") + ".\n")
    if c["summary"]:
        out.append(table(["operation", "median ratio, sizes ≥ 1 MiB", "lowest"],
                         [[op, f"{a:.3f}", f"{b:.3f}"] for op, (a, b) in c["summary"].items()]) + "\n")
    for op, rows in c["ops"].items():
        if not rows:
            continue
        gloo = not device and has_gloo(rows[0])
        if device:  # one process: no bus bandwidth, the times
            h = ["bytes", "strata µs", f"{raw} µs", "ratio", "device copy µs"]
            body = [[fmt(int(r[0][0])), r[1][0], r[2][0], r[3][0], r[4][0] if len(r) > 4 else "-"] for r in rows]
        else:
            h = ["bytes", "strata busbw", f"{raw} busbw", "ratio"] + (["gloo µs", "gloo busbw", "gloo / raw"]
                                                                   if gloo else [])
            body = [[fmt(int(r[0][0])), r[1][2], r[2][2], r[3][0]] + (r[4][:3] if gloo else []) for r in rows]
        out.append(f"{op}:\n\n" + table(h, body) + "\n")
    if c["breakdown"]:
        out.append("Per-call breakdown (what each thing `nccl_comm` does costs beside raw NCCL):\n\n```\n# per-call "
                   "breakdown" + c["breakdown"].rstrip() + "\n```\n")


def section_pipeline(runs, parsed, out):
    p = parsed.get("pipeline")
    if not p:
        return
    out.append("## Pipeline bubble\n")
    out.append(f"{cmd(runs['pipeline'])} ({p['head']}): each stage's idle fraction, measured, next to the ideal "
               "(p−1)/(m+p−1). More processes than cores make the idle time include waiting for a core.\n")
    for stages, rows in p["bubble"].items():
        out.append(f"p = {stages}:\n\n" + table(["micro-batches m", "ideal", "1F1B", "GPipe"],
                                                [[m, f"{i:.3f}", f"{a:.3f}", f"{b:.3f}"] for m, i, a, b in rows]) + "\n")
        mem = p["memory"].get(stages)
        if mem:
            out.append(f"Peak activation MiB per stage at m = 8, p = {stages}:\n\n" + table(
                ["stage", "GPipe", "1F1B"], [[s, f"{a:.2f}", f"{b:.2f}"] for s, a, b in mem]) + "\n")


def section_trace(runs, parsed, out):
    t = parsed.get("trace")
    if not t:
        return
    out.append("## What tracing costs\n")
    out.append(f"{cmd(runs['trace'])} ({t['head']}):\n")
    out.append(table(["tracing", "median step ms", "vs off"],
                     [[k, f"{v[0]:.2f}", f"{v[1]:.3f}"] for k, v in t["rows"].items()]) + "\n")
    if t["notes"]:
        out.append("\n".join(f"- {n}" for n in t["notes"]) + "\n")


def section_finetune(runs, parsed, out):
    keys = [k for k in ("finetune", "finetune_4") if k in runs]
    if not keys:
        return
    out.append("## Fine-tuning Qwen2\n")
    for k in keys:
        run, f = runs[k], parsed.get(k)
        if not f:
            continue
        out.append(f"{cmd(run)}" + (f" ({f['layout']})" if f["layout"] else "") + ":\n")
        out.append(table(["rank", "planned MiB", "reported MiB", "peak resident MiB"],
                         [[c.strip() for c in r.strip("|").split("|")] for r in f["rows"]]) + "\n")
        lines = [f"strata: {f['tokens']:.1f} tokens/s at the median step, {f['peak']} MiB resident over all ranks, "
                 f"losses {f['losses']}"]
        if f["peer"]:
            v, threads, params, tokens, peak, losses = f["peer"]
            lines.append(f"PyTorch {v} + transformers ({threads} threads, {int(params):,} params): {tokens} tokens/s, "
                         f"{peak} MiB peak resident, losses {losses}")
        if f["ratio"]:
            lines.append(f"strata / PyTorch: tokens/s {f['ratio'][0]}, peak memory {f['ratio'][1]}")
        out.append("\n".join(f"- {l}" for l in lines) + "\n")


def section_device(runs, parsed, out):
    keys = [k for k in ("device_optimizer", "device_collectives", "device_train") if k in runs]
    if not keys:
        return
    out.append("## On the GPU\n")
    tr = parsed.get("device_train")
    if tr:
        names = {"gpt": "gpt at GPT-2 124M's shape", "qwen2": "Qwen2 at Qwen2.5-0.5B's shape (tied, seq 1024)"}
        peers = {"gpt": parsed.get("device_torch_train"), "qwen2": parsed.get("device_qwen2_peer")}
        out.append(f"{cmd(runs['device_train'])}: bf16 mixed precision, AdamW, ZeRO-1, one GPU; params: those that "
                   "multiply" + (", next to " + " and ".join(cmd(runs[k]) for k in ("device_torch_train",
                                                                                  "device_qwen2_peer")
                                                   if parsed.get(k)) if any(peers.values()) else "") + ":\n")
        rows = []
        for model, r in tr.items():
            p = peers[model]
            peer_tokens = None
            if p and model == "gpt" and "G" in p["rows"]:
                peer_tokens = p["rows"]["G"]["tokens"]
            elif p and model == "qwen2":
                peer_tokens = p["tokens_per_s"]
            rows.append([names[model], fmt(r["params"]), fmt(r["tokens"]), r["tflops"], r["mfu"],
                         fmt(peer_tokens) if peer_tokens else "-",
                         f"{r['tokens'] / peer_tokens:.2f}" if peer_tokens else "-"])
        out.append(table(["model", "params", "strata tokens/s", "TFLOP/s", "MFU %", "PyTorch tokens/s",
                          "strata / PyTorch"], rows) + "\n")
        q = peers["qwen2"]
        if q and q.get("peak_device_bytes"):
            out.append(f"transformers' peak allocated device memory at the Qwen2 shape: "
                       f"{q['peak_device_bytes'] / 2**20:,.0f} MiB.\n")
        out.append("```\n" + open(runs["device_train"]["output"]).read().strip() + "\n```\n")
    o = parsed.get("device_optimizer")
    if o:
        out.append(f"{cmd(runs['device_optimizer'])}: fused AdamW and Lion against a device-to-device copy"
                   + (" (" + "; ".join(o["targets"]) + ")" if o["targets"] else "") + ":\n")
        out.append("```\n" + "\n".join(l for l in open(runs["device_optimizer"]["output"]).read().splitlines()
                                        if not l.startswith("# target")).strip() + "\n```\n")
    if parsed.get("device_collectives"):
        section_collectives(runs, parsed, out, "device_collectives", device=True)


def main():
    work, dest = sys.argv[1], sys.argv[2]
    meta = json.load(open(os.path.join(work, "meta.json")))
    runs = {}
    path = os.path.join(work, "runs.jsonl")
    if os.path.exists(path):
        for l in open(path):
            r = json.loads(l)
            runs[r["id"]] = r
    parsed, problems = {}, []
    for k, r in runs.items():
        if r.get("skipped"):
            continue
        text = open(r["output"]).read() if os.path.exists(r["output"]) else ""
        if r["rc"] != 0:
            problems.append(f"{k}: `{r['command']}` exited {r['rc']}")
            continue
        try:
            parsed[k] = PARSERS[r["parser"]](text)
        except ParseError as e:
            problems.append(f"{k}: `{r['command']}`: its output did not parse ({e})")
    merge_rounds(runs, parsed)

    out = ["# Performance", "",
           "Every figure that README.md and docs/ quote, measured by one command on one machine. Generated by "
           "`scripts/bench`; do not edit by hand: run it again.", "",
           f"- command: `{meta['command']}`",
           f"- machine: {meta['cpu']}, {meta['cores']} cores, {meta['memory']} memory; {meta['gpu']}",
           f"- commit: {meta['commit']}", f"- date: {meta['date']}",
           f"- build: {meta['build']}", f"- mode: {meta['mode']}"]
    for note in meta.get("notes", []):
        out.append(f"- {note}")
    out.append("")
    out.append("Timings are medians, and each benchmark measures its baseline in the same run. Each table names the "
               "command that printed it, run from the build directory (the MPI runs with Open MPI's root and "
               "oversubscribe variables that scripts/bench sets).\n")
    skipped = [(k, r) for k, r in runs.items() if r.get("skipped")]
    if skipped or problems:
        out.append("## Left out\n")
        out.append("\n".join(f"- `{r['command']}`: {r['skipped']}" for _, r in skipped) +
                   ("\n" if skipped else "") + "\n".join(f"- {p}" for p in problems) + "\n")
    for s in (section_train, section_zero, section_optimizer):
        s(runs, parsed, out)
    if "collectives" in parsed:
        out.append("## Collectives on the host\n")
        section_collectives(runs, parsed, out)
    for s in (section_pipeline, section_trace, section_finetune, section_device):
        s(runs, parsed, out)
    timing = [f"{k} {r['seconds']} s" for k, r in runs.items() if not r.get("skipped")]
    if timing:
        out.append(f"Run times: {', '.join(timing)}.\n")
    text = "\n".join(out).rstrip() + "\n"
    text = re.sub(r"\n{3,}", "\n\n", text)
    tmp = dest + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, dest)
    for p in problems:
        print(f"bench: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
