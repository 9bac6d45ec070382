#!/usr/bin/env python3
"""The PyTorch peer of bench/train: the gpt example's model (GPT-2's shape: token and
position embeddings, pre-norm blocks of attention and a tanh-GELU MLP, all with biases,
a final LayerNorm, an untied head without bias) at the same sizes, trained the same way
(one process, AdamW fused, the global batch in the same micro-batches), for the ratio in
docs/performance.md. Run by hand or by scripts/bench, never in CI, with torch from PyPI
in a virtual environment and the same threads as bench/train:

    OMP_NUM_THREADS=2 VENV/bin/python bench/peers/torch_train.py [--sizes S,M,L] [--attention eager|sdpa]

On a GPU, beside `bench/train --device cuda` (GPT-2 124M's shape, size G: bf16 autocast
with fp32 weights, fused AdamW, SDPA, batch 8 in one piece):

    python3 bench/peers/torch_train.py --device cuda

Prints, per size, the parameter count, the median step time after the warm-up steps,
tokens/s and achieved GFLOP/s with bench/train's FLOP count (6 per param per token, the
token and position tables left out, + 12 * layers * dim * seq), and on a GPU the peak of
allocated device memory.
"""
import argparse
import math
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SIZES = {  # dim, layers, heads, seq, vocab, global batch, micro-batches
    "S": (128, 2, 4, 64, 256, 32, 2),
    "M": (256, 4, 8, 128, 512, 16, 2),
    "L": (512, 6, 8, 256, 1024, 8, 2),
    "G": (768, 12, 12, 1024, 50257, 8, 1),  # GPT-2 124M, bench/train --device cuda's shape
}


class Block(nn.Module):
    def __init__(self, dim, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def attend(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # eager: the scores materialised, as strata's attention does
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
            mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
            y = scores.masked_fill(mask, float("-inf")).softmax(-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, d))

    def forward(self, x):
        x = x + self.attend(self.ln1(x))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, dim, layers, heads, seq, vocab, attention):
        super().__init__()
        self.token, self.position = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, attention) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, targets):
        x = self.token(ids) + self.position(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def run(name, a):
    dim, layers, heads, seq, vocab, batch, micro = SIZES[name]
    cuda = a.device == "cuda"
    torch.manual_seed(0)
    model = GPT(dim, layers, heads, seq, vocab, a.attention).to(a.device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator().manual_seed(5)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for s in range(a.warmup + a.steps):
        rows = torch.randint(0, vocab, (batch, seq + 1), generator=gen).to(a.device)
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for chunk in rows.chunk(micro):
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = model(chunk[:, :-1], chunk[:, 1:]) / micro
            loss.backward()
        opt.step()
        sync()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    t = sorted(times)[len(times) // 2]
    tokens = batch * seq
    counted = params - (vocab + seq) * dim  # bench/train's count: the lookup tables do not multiply
    flops = (6 * counted + 12 * layers * dim * seq) * tokens
    print(f"{name:<4} {dim:4d} {layers:6d} {heads:5d} {seq:5d} {vocab:5d} {params:10d} {batch:7d} "
          f"{t * 1e3:9.1f} {tokens / t:10.0f} {flops / t * 1e-9:9.2f}", flush=True)
    if cuda:
        print(f"# {name}: peak allocated device memory {torch.cuda.max_memory_allocated() / 2**20:,.0f} MiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--sizes", default=None, help="default: S,M,L on the host, G on a GPU")
    ap.add_argument("--attention", choices=["eager", "sdpa"], default=None, help="default: eager on the host, sdpa on a GPU")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default=None,
                    help="bf16: autocast over fp32 weights (default on a GPU); fp32 (default on the host)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    cuda = a.device == "cuda"
    a.sizes = a.sizes or ("G" if cuda else "S,M,L")
    a.attention = a.attention or ("sdpa" if cuda else "eager")
    a.precision = a.precision or ("bf16" if cuda else "fp32")
    for name in a.sizes.split(","):
        if name not in SIZES:
            ap.error(f"--sizes: unknown size '{name}' (one of {', '.join(SIZES)})")
    if cuda and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no GPU (torch.cuda.is_available() is False)")
    where = torch.cuda.get_device_name() if cuda else f"{torch.get_num_threads()} threads " \
        f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')})"
    print(f"# torch_train: torch {torch.__version__}, {where}, {a.attention} attention, {a.precision}, "
          f"median of {a.steps} steps after {a.warmup}")
    print(f"{'size':<4} {'dim':>4} {'layers':>6} {'heads':>5} {'seq':>5} {'vocab':>5} {'params':>10} {'batch':>7} "
          f"{'step ms':>9} {'tokens/s':>10} {'GFLOP/s':>9}")
    for name in a.sizes.split(","):
        run(name, a)


if __name__ == "__main__":
    main()
