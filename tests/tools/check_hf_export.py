#!/usr/bin/env python3
"""strata's Qwen2 export read by the reference `safetensors` package: the exported
directory has the fixture's tensor names, shapes and values (F32: bit for bit; BF16:
the round-to-nearest-even of each value), its config.json the fixture's sizes, and a
sharded export an index that lists every tensor once.

Run by ctest (tests/io.cmake): check_hf_export.py --tool PATH/qwen2_export --fixture DIR
Needs numpy and safetensors (scripts/deps installs them with pip).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from safetensors import safe_open


def files_of(d):
    """{tensor name: file} of a directory, through its index when sharded."""
    index = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            return {k: os.path.join(d, v) for k, v in json.load(f)["weight_map"].items()}
    path = os.path.join(d, "model.safetensors")
    with safe_open(path, framework="numpy") as f:
        return {k: path for k in f.keys()}


def tensors_of(d):
    """{name: (dtype, shape, float32 values)}: names, dtypes and shapes as the package reads
    them; values through it for F32, and from the raw bytes for BF16, which numpy lacks."""
    out = {}
    by_file = {}
    for k, path in files_of(d).items():
        by_file.setdefault(path, []).append(k)
    for path, names in by_file.items():
        with safe_open(path, framework="numpy") as f:
            assert sorted(f.keys()) == sorted(names), f"{path}: holds {sorted(f.keys())}, the index says {sorted(names)}"
            for k in names:
                sl = f.get_slice(k)
                dtype, shape = sl.get_dtype(), tuple(sl.get_shape())
                values = f.get_tensor(k) if dtype == "F32" else None
                out[k] = (dtype, shape, values)
        with open(path, "rb") as raw:
            n = int.from_bytes(raw.read(8), "little")
            header = json.loads(raw.read(n))
            data = raw.read()
        for k in names:
            dtype, shape, values = out[k]
            if dtype == "BF16":
                b, e = header[k]["data_offsets"]
                bits = np.frombuffer(data[b:e], dtype=np.uint16).astype(np.uint32) << 16
                out[k] = (dtype, shape, bits.view(np.float32).reshape(shape))
    return out


def bf16_round(a):
    # float32 -> bf16 round to nearest even, back to float32 (finite values only here)
    u = a.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--fixture", required=True)
    args = ap.parse_args()
    want = tensors_of(args.fixture)
    with open(os.path.join(args.fixture, "config.json")) as f:
        want_cfg = json.load(f)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, shard in (("f32", "0"), ("bf16", "20000")):
            out = os.path.join(tmp, dtype)
            cmd = [args.tool, args.fixture, out, dtype] + ([shard] if shard != "0" else [])
            subprocess.run(cmd, check=True)
            got = tensors_of(out)
            assert sorted(got) == sorted(want), f"{dtype}: names differ: {sorted(set(got) ^ set(want))}"
            for k, (_, shape, v) in want.items():
                gd, gs, g = got[k]
                assert gs == shape, f"{dtype} {k}: shape {gs} vs {shape}"
                assert gd == dtype.upper(), f"{dtype} {k}: stored as {gd}"
                expect = v if dtype == "f32" else bf16_round(v)
                assert np.array_equal(g, expect), f"{dtype} {k}: values differ"
            if dtype == "bf16":
                assert os.path.exists(os.path.join(out, "model.safetensors.index.json")), "no index for the shards"
            with open(os.path.join(out, "config.json")) as f:
                cfg = json.load(f)
            for key in ("model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "tie_word_embeddings"):
                assert cfg[key] == want_cfg[key], f"config {key}: {cfg[key]} vs {want_cfg[key]}"
            print(f"{dtype}: {len(got)} tensors as the fixture's")
    # A corrupt input is refused with a message naming the file.
    with tempfile.TemporaryDirectory() as tmp:
        bad = os.path.join(tmp, "bad")
        os.makedirs(bad)
        for name in ("config.json", "model.safetensors"):
            with open(os.path.join(args.fixture, name), "rb") as f, open(os.path.join(bad, name), "wb") as g:
                data = f.read()
                g.write(data[:-64] if name.endswith(".safetensors") else data)
        r = subprocess.run([args.tool, bad, os.path.join(tmp, "out")], capture_output=True, text=True)
        assert r.returncode == 1 and "model.safetensors" in r.stderr, (r.returncode, r.stderr)
    print("ok")


if __name__ == "__main__":
    sys.exit(main())
