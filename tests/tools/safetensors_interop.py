#!/usr/bin/env python3
"""Interop between strata's safetensors code and the reference Python package.

(a) strata writes a file (tests/tools/safetensors_tool.cpp `write`) that
    safetensors.numpy reads back with the same dtypes, shapes, values and metadata;
    without BF16 (which numpy lacks) the bytes equal those of safetensors.numpy.save.
(b) the package writes files (numpy dtypes, and BF16 through its raw serializer) that
    strata reads (`dump`) with the same names, order, dtypes, shapes, values, metadata.
(c) a file the package wrote, then truncated, is rejected by both, strata naming it.

Run by ctest (tests/io.cmake): safetensors_interop.py --tool PATH/safetensors_tool
Needs numpy and safetensors (scripts/deps installs them with pip).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import safetensors
    from safetensors import deserialize, safe_open
    from safetensors.numpy import load_file, save, save_file
except ImportError as e:  # a clear failure, not a skip: CI must run this
    print(f"safetensors_interop: {e}; install with scripts/deps (pip install numpy safetensors)")
    sys.exit(1)

NUMPY_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8,
}

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAIL: {what}")


def sample_tensors(rng):
    """Deterministic arrays of every numpy dtype strata knows, with edge shapes and values."""
    t = {}
    t["layers.0.weight"] = rng.standard_normal((64, 33)).astype(np.float32)
    t["big"] = (rng.standard_normal(10_000) * 1e3).astype(np.float32)
    t["f64"] = np.array([[1.0 / 3.0, -2.5e-300, 1e300], [0.0, -7.25, 2.0 ** -1074]], dtype=np.float64)
    t["f16"] = np.array([0.1, -65504.0, 6e-8, 1.0, -0.0009765625], dtype=np.float16)
    t["i64"] = np.array([-(2 ** 63), 2 ** 63 - 1, 0, -1], dtype=np.int64)
    t["i32"] = rng.integers(-(2 ** 31), 2 ** 31, size=(3, 4), dtype=np.int32)
    t["i16"] = np.array([-32768, 32767, 5], dtype=np.int16)
    t["i8"] = np.array([-128, 127, 0, -1], dtype=np.int8)
    t["u64"] = np.array([2 ** 64 - 1, 0, 12345678901234567890], dtype=np.uint64)
    t["u32"] = np.array([2 ** 32 - 1, 7], dtype=np.uint32)
    t["u16"] = np.array([65535, 1, 2], dtype=np.uint16)
    t["u8"] = np.arange(0, 256, 17, dtype=np.uint8).reshape(1, -1)
    t["empty"] = np.zeros((0, 3), dtype=np.float32)
    t["scalar"] = np.array(2.5, dtype=np.float32)
    return t


def bf16_bits(rng, n):
    """BF16 values as their 16-bit patterns (the top half of float32s)."""
    f = rng.standard_normal(n).astype(np.float32)
    return (f.view(np.uint32) >> 16).astype(np.uint16)


def bf16_to_float(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def spec_of(tensors, bf16=None, metadata=None):
    out = {"order": "sorted", "metadata": metadata or {}, "tensors": []}
    for name, a in tensors.items():
        dt = next(k for k, v in NUMPY_DTYPES.items() if a.dtype == v)
        vals = [float(x) for x in a.ravel()] if a.dtype.kind == "f" else [int(x) for x in a.ravel()]
        out["tensors"].append({"name": name, "dtype": dt, "shape": list(a.shape), "values": vals})
    if bf16 is not None:
        name, bits = bf16
        out["tensors"].append({"name": name, "dtype": "BF16", "shape": list(bits.shape),
                               "values": [float(x) for x in bf16_to_float(bits)]})
    return out


def run_tool(tool, *args):
    return subprocess.run([tool, *args], capture_output=True, text=True)


def strata_writes(tool, tmp, tensors, bits):
    """(a): strata's file read by safetensors.numpy (and BF16 through the raw deserializer)."""
    spec_path = os.path.join(tmp, "spec.json")
    out = os.path.join(tmp, "strata.safetensors")
    with open(spec_path, "w") as f:
        json.dump(spec_of(tensors, ("b16", bits), {"format": "pt"}), f)
    r = run_tool(tool, "write", spec_path, out)
    check(r.returncode == 0, f"strata write failed: {r.stderr}")
    # numpy has no bfloat16: read the numpy dtypes one by one, BF16 through deserialize.
    with safe_open(out, framework="np") as f:
        names = set(f.keys())
        loaded = {name: f.get_tensor(name) for name in tensors if name in names}
    check(names == set(tensors) | {"b16"}, f"names read by python: {sorted(names)}")
    for name, a in tensors.items():
        b = loaded.get(name)
        check(b is not None and b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b),
              f"python read strata's {name}: {None if b is None else (b.dtype, b.shape)}")
    with open(out, "rb") as f:
        raw = dict(deserialize(f.read()))
    check(raw["b16"]["dtype"].upper() in ("BF16", "BFLOAT16") and list(raw["b16"]["shape"]) == list(bits.shape),
          f"python's view of strata's BF16 tensor: {raw['b16']['dtype']} {raw['b16']['shape']}")
    check(np.array_equal(np.frombuffer(raw["b16"]["data"], dtype=np.uint16), bits), "BF16 bits strata -> python")
    with safe_open(out, framework="np") as f:
        check(f.metadata() == {"format": "pt"}, f"metadata python read: {f.metadata()}")

    # Same tensors without BF16: strata's bytes are the reference writer's bytes.
    with open(spec_path, "w") as f:
        json.dump(spec_of(tensors, None, {"format": "pt"}), f)
    out2 = os.path.join(tmp, "strata_nobf16.safetensors")
    r = run_tool(tool, "write", spec_path, out2)
    check(r.returncode == 0, f"strata write (no bf16) failed: {r.stderr}")
    with open(out2, "rb") as f:
        mine = f.read()
    theirs = save(tensors, metadata={"format": "pt"})
    check(mine == theirs, f"byte-identical to safetensors.numpy.save ({len(mine)} vs {len(theirs)} bytes)")
    return len(tensors) + 1, mine == theirs


def serialize_bf16(path, name, bits, metadata):
    """BF16 through the package's raw serializer (numpy has no bfloat16)."""
    bits = np.ascontiguousarray(bits)
    if hasattr(safetensors, "TensorSpec"):
        spec = {name: safetensors.TensorSpec(dtype="bfloat16", shape=list(bits.shape),
                                             data_ptr=bits.ctypes.data, data_len=bits.nbytes)}
    else:
        spec = {name: {"dtype": "bfloat16", "shape": list(bits.shape), "data": bits.tobytes()}}
    safetensors.serialize_file(spec, path, metadata=metadata)


def python_writes(tool, tmp, tensors, bits):
    """(b): files written by the package, read by strata."""
    count = 0
    path = os.path.join(tmp, "python.safetensors")
    meta = {"producer": "python", "note": "caf\u00e9 \"quoted\""}
    save_file(tensors, path, metadata=meta)
    r = run_tool(tool, "dump", path)
    check(r.returncode == 0, f"strata could not read python's file: {r.stderr}")
    if r.returncode == 0:
        d = json.loads(r.stdout)
        check(d["metadata"] == meta, f"metadata strata read: {d['metadata']}")
        with safe_open(path, framework="np") as f:
            file_order = list(f.keys())
        check(set(d["names"]) == set(tensors), f"names strata read: {d['names']}")
        # strata lists names in data order; the reference writes data in its sorted order.
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        by_offset = sorted((v["data_offsets"], k) for k, v in header.items() if k != "__metadata__")
        check(d["names"] == [k for _, k in by_offset], f"data order: {d['names']} vs {by_offset}")
        check(sorted(file_order) == sorted(tensors), "python lists the same names")
        for name, a in tensors.items():
            t = d["tensors"].get(name)
            if t is None:
                check(False, f"strata did not list {name}")
                continue
            want_dt = next(k for k, v in NUMPY_DTYPES.items() if a.dtype == v)
            got = np.array(t["values"], dtype=np.float64 if a.dtype.kind == "f" else object)
            ok = t["dtype"] == want_dt and t["shape"] == list(a.shape) and got.size == a.size
            if ok and a.dtype.kind == "f":
                ok = np.array_equal(got, a.astype(np.float64).ravel())
            elif ok:
                ok = all(int(x) == int(y) for x, y in zip(got, a.ravel()))
            check(ok, f"strata read python's {name} ({t['dtype']} {t['shape']})")
            count += 1

    path = os.path.join(tmp, "python_bf16.safetensors")
    serialize_bf16(path, "emb.weight", bits.reshape(5, -1), {"format": "pt"})
    r = run_tool(tool, "dump", path)
    check(r.returncode == 0, f"strata could not read python's BF16 file: {r.stderr}")
    if r.returncode == 0:
        t = json.loads(r.stdout)["tensors"]["emb.weight"]
        check(t["dtype"] == "BF16" and t["shape"] == [5, bits.size // 5], f"BF16 info {t['dtype']} {t['shape']}")
        check(np.array_equal(np.array(t["values"], dtype=np.float32), bf16_to_float(bits)), "BF16 values python -> strata")
        count += 1
    return count


def both_reject(tool, tmp, tensors):
    """(c): a truncated file is refused by the package and by strata, which names it."""
    good = os.path.join(tmp, "python.safetensors")
    bad = os.path.join(tmp, "truncated.safetensors")
    with open(good, "rb") as f:
        data = f.read()
    with open(bad, "wb") as f:
        f.write(data[:-10])
    try:
        load_file(bad)
        python_rejects = False
    except Exception:
        python_rejects = True
    check(python_rejects, "the reference package rejects the truncated file")
    r = run_tool(tool, "dump", bad)
    check(r.returncode == 1 and bad in r.stderr and "data area" in r.stderr,
          f"strata rejects the truncated file naming it: rc {r.returncode}, {r.stderr.strip()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True, help="path of the safetensors_tool binary")
    args = ap.parse_args()
    rng = np.random.default_rng(20240611)
    tensors = sample_tensors(rng)
    bits = bf16_bits(rng, 40)
    with tempfile.TemporaryDirectory(prefix="strata_st_interop_") as tmp:
        n_a, identical = strata_writes(args.tool, tmp, tensors, bits)
        n_b = python_writes(args.tool, tmp, tensors, bits)
        both_reject(args.tool, tmp, tensors)
    print(f"safetensors {safetensors.__version__}, numpy {np.__version__}: strata -> python {n_a} tensors, "
          f"python -> strata {n_b} tensors, byte-identical to the reference writer: {identical}")
    if failures:
        print(f"{len(failures)} check(s) failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
