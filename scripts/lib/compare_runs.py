#!/usr/bin/env python3
"""Compares the --report JSON files of example runs (scripts/gpu-check).

usage: compare_runs.py same-hash LABEL REPORT...
         every report has the same weights_hash (and at least two reports are given)
       compare_runs.py close TOL LABEL REFERENCE REPORT...
         each report's per-step losses are within TOL (relative) of the reference's,
         step for step, over the same non-zero number of steps
Prints one line per check; exits 1 when one fails, 2 on bad usage or an unreadable report.
"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        print(f"compare_runs: cannot read {path}: {e}", file=sys.stderr)
        sys.exit(2)
    for key in ("weights_hash", "losses"):
        if key not in r:
            print(f"compare_runs: {path} has no {key}", file=sys.stderr)
            sys.exit(2)
    return r


def same_hash(label, paths):
    if len(paths) < 2:
        print("compare_runs: same-hash needs at least two reports", file=sys.stderr)
        return 2
    hashes = {p: load(p)["weights_hash"] for p in paths}
    if len(set(hashes.values())) == 1:
        print(f"{label}: one weights_hash {next(iter(hashes.values()))} over {len(paths)} runs")
        return 0
    print(f"{label}: weights_hash differs: " + ", ".join(f"{p.rsplit('/', 1)[-1]} {h}" for p, h in hashes.items()))
    return 1


def close(tol, label, ref_path, paths):
    ref = load(ref_path)["losses"]
    if not ref:
        print(f"{label}: the reference {ref_path} has no losses")
        return 1
    status = 0
    for p in paths:
        losses = load(p)["losses"]
        if len(losses) != len(ref):
            print(f"{label}: {p} has {len(losses)} losses, the reference {len(ref)}")
            status = 1
            continue
        worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(losses, ref))
        ok = worst <= tol
        status |= 0 if ok else 1
        print(f"{label}: {p.rsplit('/', 1)[-1]} vs {ref_path.rsplit('/', 1)[-1]}: largest relative loss difference "
              f"{worst:.2e} over {len(ref)} steps ({'within' if ok else 'NOT within'} {tol:g})")
    return status


def main(argv):
    if len(argv) >= 4 and argv[1] == "same-hash":
        return same_hash(argv[2], argv[3:])
    if len(argv) >= 6 and argv[1] == "close":
        try:
            tol = float(argv[2])
        except ValueError:
            print(f"compare_runs: TOL '{argv[2]}' is not a number\n{__doc__}", file=sys.stderr)
            return 2
        return close(tol, argv[3], argv[4], argv[5:])
    if len(argv) == 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    print(f"compare_runs: bad arguments\n{__doc__}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
