#!/usr/bin/env python3
"""The PyTorch + transformers peer of `qwen2` (examples/qwen2): the same model shape,
the same token file and window contract, the same optimizer, on this machine's CPU, for
the ratio in the README. Run by hand (never in CI), with torch and transformers from PyPI:

    python3 bench/peers/qwen2_finetune.py --config examples/qwen2/configs/qwen2.5-0.5b.json \
        --data text.train.bin --seq 256 --batch 2 --steps 3 --precision bf16 --report peer.json

One process (torch's own threads, OMP_NUM_THREADS) trains Qwen2ForCausalLM from random
weights with AdamW (weight decay 0.01 on tensors of rank >= 2, none on 1-D, constant lr),
step s reading windows [s B, (s + 1) B) of seq + 1 tokens as strata does. The report has
the losses, tokens/s over the steps after the first, and the peak resident memory
(ru_maxrss) to compare with strata's `memory_per_rank`.

For the README's table beside `bench/train --models qwen2`, `--size S|M|L` takes the
shape of bench/train's size of that name (the demo's config with its sizes replaced) in
place of `--config`, and without `--data` the windows are seeded random tokens:

    OMP_NUM_THREADS=2 python3 bench/peers/qwen2_finetune.py --size M --precision fp32 --steps 6

On a GPU (`--device cuda`: the model and batches on the device, bf16 autocast over fp32
weights, fused AdamW, SDPA), the report adds the peak of allocated device memory
(torch.cuda.max_memory_allocated), beside `qwen2 --device cuda` at the same shape:

    python3 bench/peers/qwen2_finetune.py --device cuda --config examples/qwen2/configs/qwen2.5-0.5b.json \
        --seq 1024 --batch 8 --steps 6
"""
import argparse
import json
import resource
import struct
import time

import os

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

# bench/train's Qwen2 sizes: hidden, intermediate, layers, heads, kv heads, seq, vocab, batch.
SIZES = {
    "S": (128, 352, 4, 8, 2, 64, 258, 32),
    "M": (256, 704, 4, 8, 2, 128, 512, 16),
    "L": (512, 1408, 6, 8, 2, 256, 1024, 8),
}
DEMO_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "qwen2", "configs",
                           "demo.json")


def sized_config(name):
    hidden, ffn, layers, heads, kv_heads, seq, vocab, _ = SIZES[name]
    cfg = json.load(open(DEMO_CONFIG))
    cfg.update(hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers, num_attention_heads=heads,
               num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=max(seq, 512))
    return cfg


def read_tokens(path):
    with open(path, "rb") as f:
        header = struct.unpack("<256i", f.read(1024))
        width = {(20240520, 1): np.uint16, (20240801, 7): np.uint32}[(header[0], header[1])]
        return np.frombuffer(f.read(), dtype=width, count=header[2]).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shape = ap.add_mutually_exclusive_group(required=True)
    shape.add_argument("--config", help="a Qwen2 config.json")
    shape.add_argument("--size", choices=sorted(SIZES), help="bench/train's shape, seq and batch of this name")
    ap.add_argument("--data", default="", help="a token file (llm.c layout); default: seeded random tokens")
    ap.add_argument("--seq", type=int, default=None, help="default: the size's, else 256")
    ap.add_argument("--batch", type=int, default=None, help="default: the size's, else 2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--lr", type=float, default=1e-5)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16",
                    help="bf16: autocast of the forward, fp32 weights and optimizer (mixed precision)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--report", default="")
    a = ap.parse_args()
    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU (torch.cuda.is_available() is False)")

    raw = sized_config(a.size) if a.size else json.load(open(a.config))
    if a.seq is None:
        a.seq = SIZES[a.size][5] if a.size else 256
    if a.batch is None:
        a.batch = SIZES[a.size][7] if a.size else 2
    # The file's dtype is the checkpoint's; the weights here are fp32 (mixed precision keeps
    # fp32 weights under autocast), whatever a transformers version makes of that key.
    cfg = Qwen2Config(**{k: v for k, v in raw.items() if k not in ("architectures", "torch_dtype", "dtype")})
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(device=a.device, dtype=torch.float32).train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, fused=True)
    if a.data:
        tokens = read_tokens(a.data)
    else:
        tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, a.batch * a.steps * (a.seq + 1) + 1)
    windows = (len(tokens) - 1) // a.seq
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    losses, seconds = [], []
    for s in range(a.steps):
        rows = [((s * a.batch + r) % windows) * a.seq for r in range(a.batch)]
        w = torch.from_numpy(np.stack([tokens[i:i + a.seq + 1] for i in rows])).to(a.device)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(input_ids=w[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, cfg.vocab_size), w[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        sync()
        seconds.append(time.perf_counter() - t0)
        losses.append(loss.item())
        print(f"step {s + 1}/{a.steps}  loss {loss.item():.6f}  {a.batch * a.seq / seconds[-1]:.4g} tokens/s", flush=True)
    timed = seconds[1:] or seconds
    r = {"losses": losses, "step_seconds": seconds, "tokens_per_s": a.batch * a.seq * len(timed) / sum(timed),
         "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
         "threads": torch.get_num_threads(), "torch": torch.__version__,
         "params": sum(p.numel() for p in model.parameters()), "device": a.device}
    if cuda:
        r["device_name"] = torch.cuda.get_device_name()
        r["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps({k: v for k, v in r.items() if k != "step_seconds"}))
    if a.report:
        json.dump(r, open(a.report, "w"), indent=2)


if __name__ == "__main__":
    main()
