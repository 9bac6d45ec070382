#!/usr/bin/env python3
"""Writes tests/data/adamw_torch.json: 10 steps of torch.optim.AdamW on two param groups
(one with weight decay, one without, as strata's decay runs), with the grads, learning
rates and every intermediate param, so tests/unit/optim/adamw_torch.cpp can replay them.

Run from the repository root with a PyTorch install (CPU is enough):
    python3 tests/tools/make_adamw_fixture.py [--out tests/data/adamw_torch.json]

The single-tensor implementation (foreach=False, fused=False) is the reference: it is
torch's default for CPU tensors and the plainest statement of the algorithm.
"""
import argparse
import json

import torch

STEPS = 10
N = 24  # elements per group


def f32(t):
    # A float32 value written as the shortest decimal that reads back as the same float32
    # bits (Python's repr of the exact double), so the C++ side parses the exact value.
    return [float(x) for x in t.detach().to(torch.float64).flatten()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/adamw_torch.json")
    args = ap.parse_args()

    torch.manual_seed(20240611)
    hp = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    # Params of mixed magnitude; grads span tiny (near eps) to large values so that the
    # eps term, the bias corrections and the decay all matter.
    p_decay = torch.randn(N, dtype=torch.float32)
    p_plain = torch.randn(N, dtype=torch.float32) * 0.1
    p_decay.requires_grad_(True)
    p_plain.requires_grad_(True)
    init = {"decay": f32(p_decay), "no_decay": f32(p_plain)}

    opt = torch.optim.AdamW(
        [
            {"params": [p_decay], "weight_decay": hp["weight_decay"]},
            {"params": [p_plain], "weight_decay": 0.0},
        ],
        lr=1e-2,
        betas=hp["betas"],
        eps=hp["eps"],
        foreach=False,
        fused=False,
    )
    lrs = [1e-2 * (k + 1) / STEPS if k < 5 else 1e-2 * 0.5 ** (k - 4) for k in range(STEPS)]
    steps = []
    for k in range(STEPS):
        scale = torch.logspace(-9, 2, N, dtype=torch.float32)
        g_decay = torch.randn(N, dtype=torch.float32) * scale
        g_plain = torch.randn(N, dtype=torch.float32) * scale.flip(0)
        p_decay.grad = g_decay.clone()
        p_plain.grad = g_plain.clone()
        for group in opt.param_groups:
            group["lr"] = lrs[k]
        opt.step()
        steps.append(
            {
                "lr": lrs[k],
                "grad": {"decay": f32(g_decay), "no_decay": f32(g_plain)},
                "param": {"decay": f32(p_decay), "no_decay": f32(p_plain)},
            }
        )
    state = {
        "decay": {k: f32(opt.state[p_decay][k]) for k in ("exp_avg", "exp_avg_sq")},
        "no_decay": {k: f32(opt.state[p_plain][k]) for k in ("exp_avg", "exp_avg_sq")},
    }
    out = {
        "generator": "tests/tools/make_adamw_fixture.py",
        "torch_version": torch.__version__,
        "optimizer": "torch.optim.AdamW(foreach=False, fused=False)",
        "beta1": hp["betas"][0],
        "beta2": hp["betas"][1],
        "eps": hp["eps"],
        "weight_decay": hp["weight_decay"],
        "n": N,
        "init": init,
        "steps": steps,
        "final_state": state,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
