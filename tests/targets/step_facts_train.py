"""Target: a small transformer block trained on the CPU in the ways a step can be written, each chosen by a flag, so
that gputop's step facts (probes/diagnosis/step_facts.py) are read from a real job's stacks and source lines:

  --compile            torch.compile the model (else eager)
  --attention sdpa     F.scaled_dot_product_attention (else softmax, masked_fill and matmuls written by hand)
  --checkpoint         each block under torch.utils.checkpoint
  --autocast           the forward under torch.autocast("cpu", dtype=torch.bfloat16)
  --optimizer K        AdamW: fused, foreach or loop (foreach=False: one parameter at a time)
  --scaler on|off      a GradScaler, enabled or not (nanoGPT keeps one, disabled unless it trains in float16)
  --item               .item() of a metric every step (a host synchronisation on a GPU)
  --batch N            sequences a step (default 8; 1 makes the optimizer's share of the step larger)

Usage: step_facts_train.py [flags] [--seconds S]. Prints "ready" after the first step.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

WIDTH = 128
HEADS = 4
LAYERS = 4
TOKENS = 64
BATCH = 8
VOCAB = 4096


class HandAttention(torch.nn.Module):
    """Causal self-attention, written out: scores, mask, softmax, weighted sum."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(WIDTH, 3 * WIDTH)
        self.register_buffer("causal", torch.tril(torch.ones(TOKENS, TOKENS)).bool())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, HEADS, width // HEADS).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-2, -1)) / (width // HEADS) ** 0.5
        scores = scores.masked_fill(~self.causal[:tokens, :tokens], float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return (weights @ v).transpose(1, 2).reshape(batch, tokens, width)


class SdpaAttention(HandAttention):
    """The same attention through F.scaled_dot_product_attention."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, HEADS, width // HEADS).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2).reshape(batch, tokens, width)


class Block(torch.nn.Module):
    def __init__(self, attention: type[HandAttention]) -> None:
        super().__init__()
        self.attention = attention()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(WIDTH, 4 * WIDTH), torch.nn.GELU(),
                                       torch.nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(x)
        return x + self.mlp(x)


class Model(torch.nn.Module):
    def __init__(self, attention: type[HandAttention], checkpointed: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(attention) for _ in range(LAYERS))
        self.head = torch.nn.Linear(WIDTH, VOCAB)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return self.head(x)


def optimizer_for(kind: str, model: torch.nn.Module) -> torch.optim.Optimizer:
    # Many small parameters (biases, weights) make the per-parameter loop's time show in the stacks.
    options = {"fused": {"fused": True}, "foreach": {"foreach": True}, "loop": {"foreach": False}}[kind]
    return torch.optim.AdamW(model.parameters(), lr=1e-4, **options)


def forward_in_bf16(forward, batch: torch.Tensor) -> torch.Tensor:
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return forward(batch).float()


def forward_as_is(forward, batch: torch.Tensor) -> torch.Tensor:
    return forward(batch)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--attention", choices=("sdpa", "hand"), default="hand")
    parser.add_argument("--checkpoint", action="store_true")
    parser.add_argument("--autocast", action="store_true")
    parser.add_argument("--optimizer", choices=("fused", "foreach", "loop"), default="loop")
    parser.add_argument("--scaler", choices=("on", "off"))
    parser.add_argument("--item", action="store_true")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--seconds", type=float, default=300.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    model = Model(SdpaAttention if args.attention == "sdpa" else HandAttention, args.checkpoint)
    optimizer = optimizer_for(args.optimizer, model)
    forward = torch.compile(model) if args.compile else model
    scaler = torch.amp.GradScaler("cpu", enabled=args.scaler == "on") if args.scaler else None
    batch = torch.randn(args.batch, TOKENS, WIDTH)
    end = time.monotonic() + args.seconds
    logits_of = forward_in_bf16 if args.autocast else forward_as_is
    step = 0
    while time.monotonic() < end:
        logits = logits_of(forward, batch)
        loss = logits.square().mean()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.item:  # a metric of the step's output, read on the host each step
            confidence = logits.detach().softmax(-1).amax(-1).mean().item()
            print(f"step {step} loss {loss.item():.4f} confidence {confidence:.3f}", flush=True)
        if step == 0:
            print("ready", flush=True)
        step += 1


if __name__ == "__main__":
    main()
