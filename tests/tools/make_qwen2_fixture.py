#!/usr/bin/env python3
"""Writes tests/data/qwen2_tiny/: a tiny random Qwen2 as transformers saves it, and what
transformers computes with it, for the tests that hold strata's Qwen2 to transformers.

  config.json, model.safetensors  the model (fp32, tied embeddings: no lm_head.weight)
  fixture.safetensors             tokens [B, S + 1] (I32); logits [B, S, V] of
                                  tokens[:, :S]; loss; step_loss [STEPS] (the loss before
                                  each AdamW step); and after.<name> for every tensor after
                                  STEPS steps of AdamW on that batch; label_mask [B, S] (I32,
                                  1 = train on the label) with masked_step_loss and
                                  masked_after.<name>: the same steps from the same weights
                                  with the masked labels set to -100 (ignore_index), so the
                                  loss is the mean over the labels left
  README.md                       how it was made

Every weight is random, the biases and norm weights included: transformers' defaults
(zero biases, unit norms) would hide a bias added in the wrong place or a norm weight
ignored. AdamW (torch's single-tensor form) decays matrices and embeddings, not 1-D
params, as strata's defaults do.

Run by hand from the repository root, with torch and transformers from PyPI (CPU is
enough; CI never installs them):
    python3 tests/tools/make_qwen2_fixture.py [--out tests/data/qwen2_tiny]
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


def train(model, inputs, labels):
    """STEPS steps of AdamW on one batch; the loss before each, the mean over the labels
    that are not -100 (ignore_index)."""
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, foreach=False, fused=False)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        out = model(input_ids=inputs)
        l = torch.nn.functional.cross_entropy(out.logits.reshape(-1, CONFIG["vocab_size"]), labels.reshape(-1),
                                              ignore_index=-100)
        losses.append(l.item())
        l.backward()
        opt.step()
    return losses


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

    step_loss = train(model, inputs, labels)

    # The masked run: uneven over rows (row 1 keeps 2 labels, row 3 all of them), so a
    # per-rank mean instead of the global one would show.
    mask = torch.ones(B, S, dtype=torch.int32)
    mask[0, :5] = 0
    mask[1, :S - 2] = 0
    mask[2, 3:9] = 0
    masked_labels = labels.masked_fill(mask == 0, -100)
    masked = Qwen2ForCausalLM.from_pretrained(args.out, attn_implementation="eager").to(torch.float32)
    masked_step_loss = train(masked, inputs, masked_labels)

    tensors = {
        "tokens": tokens.to(torch.int32).contiguous(),
        "label_mask": mask.contiguous(),
        "masked_step_loss": torch.tensor(masked_step_loss, dtype=torch.float32),
        "logits": logits.contiguous(),
        "loss": loss.reshape(1).contiguous(),
        "step_loss": torch.tensor(step_loss, dtype=torch.float32),
    }
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
    print(f"loss {loss.item():.6f}; step losses {step_loss}; masked {masked_step_loss}; wrote {args.out}")


if __name__ == "__main__":
    main()
