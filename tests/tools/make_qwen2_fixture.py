#!/usr/bin/env python3
"""Writes tests/data/qwen2_tiny/: a tiny random Qwen2 as transformers saves it, and what
transformers computes with it, for the tests that hold strata's Qwen2 to transformers.

  config.json, model.safetensors  the model (fp32, tied embeddings: no lm_head.weight)
  fixture.safetensors             tokens [B, S + 1] (I32); logits [B, S, V] of
                                  tokens[:, :S]; loss; step_loss [STEPS] (the loss before
                                  each AdamW step) and step_grad_norm [STEPS] (F64: the
                                  global L2 norm of that step's gradient, every param
                                  once, the tied embedding's gradient holding the head's
                                  share); after.<name> for every tensor after STEPS steps
                                  of AdamW on that batch; grad.<name> for the GRAD_TENSORS
                                  below: the first step's gradient (at the model's
                                  weights); label_mask [B, S] (I32, 1 = train on the
                                  label) with masked_step_loss, masked_step_grad_norm and
                                  masked_after.<name>: the same steps from the same weights
                                  with the masked labels set to -100 (ignore_index), so the
                                  loss is the mean over the labels left; bf16_step_loss,
                                  bf16_step_grad_norm, masked_bf16_step_grad_norm and
                                  bf16_grad.<name>: the same steps as strata's host
                                  mixed<bf16> takes them (see train_bf16)
  README.md                       how it was made

Every weight is random, the biases and norm weights included: transformers' defaults
(zero biases, unit norms) would hide a bias added in the wrong place or a norm weight
ignored. AdamW (torch's single-tensor form) decays matrices and embeddings, not 1-D
params, as strata's defaults do.

The gradients are there because AdamW hides their scale: its first step is about
lr * sign(g) for any positive multiple of g, so weights after AdamW steps cannot tell a
gradient from twice it (a sum where a mean belongs, a missing 1 / dp). The tests compare
grad_norm at every step and, through one SGD step, the GRAD_TENSORS' gradients themselves.

Run by hand from the repository root, with torch and transformers from PyPI in a virtual
environment outside the repository (CPU is enough; CI never installs them), e.g.
    python3 -m venv /opt/torchenv
    /opt/torchenv/bin/pip install torch transformers safetensors tokenizers
    /opt/torchenv/bin/python tests/tools/make_qwen2_fixture.py [--out tests/data/qwen2_tiny]
The model's weights come from a fixed seed (the same bytes with torch 2.15); the computed
values may move in their last bits with another torch or BLAS, which the tests allow for.
"""
import argparse
import json
import os

import torch
from safetensors.torch import save_file
from transformers import Qwen2Config, Qwen2ForCausalLM

B, S = 4, 16
STEPS = 3
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.999), 1e-8, 0.01
CONFIG = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
    attention_dropout=0.0,
    use_sliding_window=False,
    initializer_range=0.02,
)


# The tensors whose first-step gradient is stored: the tied embedding (vocabulary-parallel,
# its gradient summed from the embedding and the head, which a pipeline puts on different
# stages), a column-parallel weight and bias (grouped-query k), a row-parallel weight, and
# two norm weights that tensor-parallel ranks replicate (one of them on the last stage).
GRAD_TENSORS = (
    "model.embed_tokens.weight",
    "model.layers.0.self_attn.k_proj.weight",
    "model.layers.0.self_attn.k_proj.bias",
    "model.layers.1.self_attn.o_proj.weight",
    "model.layers.1.post_attention_layernorm.weight",
    "model.norm.weight",
)


def adamw(params):
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)


def loss_of(model, inputs, labels):
    out = model(input_ids=inputs)
    return torch.nn.functional.cross_entropy(out.logits.reshape(-1, CONFIG["vocab_size"]), labels.reshape(-1),
                                             ignore_index=-100)


def grad_norm(grads):
    """The global L2 norm, summed in float64 over every param once (named_parameters
    lists a tied tensor once: the embedding, whose gradient holds the head's share)."""
    return sum(float((g.double() ** 2).sum()) for g in grads) ** 0.5


def train(model, inputs, labels):
    """STEPS steps of AdamW on one batch; the loss before each, the mean over the labels
    that are not -100 (ignore_index); each step's gradient norm; the first step's
    gradients of GRAD_TENSORS."""
    model.train()
    named = dict(model.named_parameters())
    opt = adamw(list(named.values()))
    losses, norms, first = [], [], {}
    for step in range(STEPS):
        opt.zero_grad()
        l = loss_of(model, inputs, labels)
        losses.append(l.item())
        l.backward()
        norms.append(grad_norm(p.grad for p in named.values()))
        if step == 0:
            first = {n: named[n].grad.detach().clone().contiguous() for n in GRAD_TENSORS}
        opt.step()
    return losses, norms, first


def bf16(t):
    return t.to(torch.bfloat16).to(torch.float32)


def train_bf16(model, inputs, labels):
    """train() as strata's host mixed<bf16> trainer runs it at one process: an fp32 master
    that AdamW steps; each step's forward and backward in fp32 on the master rounded to
    bf16 (RNE); each param's gradient rounded to bf16, as the trainer sends it, then
    stepped in fp32. The tied embedding and head are two copies there, each gradient
    rounded apart and the two summed in fp32, so here too. (Across ranks strata rounds
    each rank's share and sums in bf16: the tests allow for that.)"""
    model.train()
    head = "lm_head.weight"
    embed = "model.embed_tokens.weight"
    model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())  # untied
    named = dict(model.named_parameters())
    master = {n: torch.nn.Parameter(p.detach().clone()) for n, p in named.items() if n != head}
    opt = adamw(list(master.values()))
    losses, norms, first = [], [], {}
    for step in range(STEPS):
        with torch.no_grad():
            for n, p in named.items():
                p.copy_(bf16(master[embed if n == head else n]))
        model.zero_grad()
        l = loss_of(model, inputs, labels)
        losses.append(l.item())
        l.backward()
        for n, m in master.items():
            m.grad = bf16(named[n].grad)
        master[embed].grad += bf16(named[head].grad)
        norms.append(grad_norm(m.grad for m in master.values()))
        if step == 0:
            first = {n: master[n].grad.detach().clone().contiguous() for n in GRAD_TENSORS}
        opt.step()
    return losses, norms, first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/qwen2_tiny")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(2024)
    cfg = Qwen2Config(**CONFIG)
    cfg._attn_implementation = "eager"  # the plain math: scores, mask, softmax in fp32
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn_like(p))
            else:  # scale 0.2 keeps the attention scores of order one: neither uniform nor saturated
                p.copy_(0.2 * torch.randn_like(p))
    model.save_pretrained(args.out, safe_serialization=True)

    tokens = torch.randint(0, CONFIG["vocab_size"], (B, S + 1), generator=torch.Generator().manual_seed(7))
    inputs, labels = tokens[:, :S], tokens[:, 1:]
    model.train()
    logits = model(input_ids=inputs).logits.detach()
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, CONFIG["vocab_size"]), labels.reshape(-1))
    # transformers' own causal-LM loss (labels shifted inside) is the same number.
    hf_loss = model(input_ids=tokens, labels=tokens).loss.detach()
    assert abs(hf_loss.item() - loss.item()) < 1e-6, (hf_loss.item(), loss.item())

    fresh = lambda: Qwen2ForCausalLM.from_pretrained(args.out, attn_implementation="eager").to(torch.float32)
    bf16_step_loss, bf16_norms, bf16_first = train_bf16(fresh(), inputs, labels)
    step_loss, norms, first = train(model, inputs, labels)

    # The masked run: uneven over rows (row 1 keeps 2 labels, row 3 all of them), so a
    # per-rank mean instead of the global one would show.
    mask = torch.ones(B, S, dtype=torch.int32)
    mask[0, :5] = 0
    mask[1, :S - 2] = 0
    mask[2, 3:9] = 0
    masked_labels = labels.masked_fill(mask == 0, -100)
    masked = fresh()
    masked_step_loss, masked_norms, _ = train(masked, inputs, masked_labels)
    _, masked_bf16_norms, _ = train_bf16(fresh(), inputs, masked_labels)

    tensors = {
        "tokens": tokens.to(torch.int32).contiguous(),
        "label_mask": mask.contiguous(),
        "masked_step_loss": torch.tensor(masked_step_loss, dtype=torch.float32),
        "logits": logits.contiguous(),
        "loss": loss.reshape(1).contiguous(),
        "step_loss": torch.tensor(step_loss, dtype=torch.float32),
        "step_grad_norm": torch.tensor(norms, dtype=torch.float64),
        "masked_step_grad_norm": torch.tensor(masked_norms, dtype=torch.float64),
        "bf16_step_loss": torch.tensor(bf16_step_loss, dtype=torch.float32),
        "bf16_step_grad_norm": torch.tensor(bf16_norms, dtype=torch.float64),
        "masked_bf16_step_grad_norm": torch.tensor(masked_bf16_norms, dtype=torch.float64),
    }
    for name in GRAD_TENSORS:
        tensors["grad." + name] = first[name]
        tensors["bf16_grad." + name] = bf16_first[name]
    for name, p in model.state_dict().items():
        if name == "lm_head.weight":  # tied: the same tensor as model.embed_tokens.weight
            continue
        tensors["after." + name] = p.detach().clone().contiguous()
    for name, p in masked.state_dict().items():
        if name != "lm_head.weight":
            tensors["masked_after." + name] = p.detach().clone().contiguous()
    save_file(tensors, os.path.join(args.out, "fixture.safetensors"),
              metadata={"lr": str(LR), "betas": json.dumps(BETAS), "eps": str(EPS),
                        "weight_decay": str(WEIGHT_DECAY), "steps": str(STEPS),
                        "torch": torch.__version__, "transformers": __import__("transformers").__version__})
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write("A tiny random Qwen2 and what transformers computes with it; made by\n"
                "`tests/tools/make_qwen2_fixture.py` (see its docstring) with torch "
                f"{torch.__version__} and transformers {__import__('transformers').__version__}.\n")
    print(f"loss {loss.item():.6f}; step losses {step_loss}; masked {masked_step_loss}; grad norms {norms}, "
          f"masked {masked_norms}, bf16 {bf16_norms}, masked bf16 {masked_bf16_norms}; wrote {args.out}")


if __name__ == "__main__":
    main()
