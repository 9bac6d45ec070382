#!/usr/bin/env python3
"""The PyTorch peer of bench/train: the gpt example's model (GPT-2's shape: token and
position embeddings, pre-norm blocks of attention and a tanh-GELU MLP, all with biases,
a final LayerNorm, an untied head without bias) at the same three sizes, trained the same
way (one process, fp32, AdamW fused on the CPU, the global batch in 2 micro-batches), for
the ratio in the README. Run by hand, never in CI, with torch from PyPI in a virtual
environment and the same threads as bench/train:

    OMP_NUM_THREADS=2 VENV/bin/python bench/peers/torch_train.py [--sizes S,M,L] [--attention eager|sdpa]

Prints, per size, the parameter count (it must equal bench/train's), the median step
time after the warm-up steps, tokens/s and achieved GFLOP/s with bench/train's FLOP count
(6 per param per token + 12 * layers * dim * seq).
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
            mask = torch.ones(s, s, dtype=torch.bool).triu(1)
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
        x = self.token(ids) + self.position(torch.arange(ids.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def run(name, attention, steps, warmup):
    dim, layers, heads, seq, vocab, batch, micro = SIZES[name]
    torch.manual_seed(0)
    model = GPT(dim, layers, heads, seq, vocab, attention)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    gen = torch.Generator().manual_seed(5)
    times = []
    for s in range(warmup + steps):
        rows = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for chunk in rows.chunk(micro):
            (model(chunk[:, :-1], chunk[:, 1:]) / micro).backward()
        opt.step()
        if s >= warmup:
            times.append(time.perf_counter() - t0)
    t = sorted(times)[len(times) // 2]
    tokens = batch * seq
    flops = (6 * params + 12 * layers * dim * seq) * tokens
    print(f"{name:<4} {dim:4d} {layers:6d} {heads:5d} {seq:5d} {vocab:5d} {params:10d} {batch:7d} "
          f"{t * 1e3:9.1f} {tokens / t:10.0f} {flops / t * 1e-9:9.2f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="S,M,L")
    ap.add_argument("--attention", choices=["eager", "sdpa"], default="eager")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    a = ap.parse_args()
    print(f"# torch_train: torch {torch.__version__}, {torch.get_num_threads()} threads "
          f"(OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), {a.attention} attention, "
          f"median of {a.steps} steps after {a.warmup}")
    print(f"{'size':<4} {'dim':>4} {'layers':>6} {'heads':>5} {'seq':>5} {'vocab':>5} {'params':>10} {'batch':>7} "
          f"{'step ms':>9} {'tokens/s':>10} {'GFLOP/s':>9}")
    for name in a.sizes.split(","):
        run(name, a.attention, a.steps, a.warmup)


if __name__ == "__main__":
    main()
