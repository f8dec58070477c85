"""Target: a small GPT trained on CPU on random tokens, configured and logging as nanoGPT's train.py does.

Its settings are module-level defaults overridden by ``--key=value`` arguments, each override echoed as nanoGPT's
configurator.py echoes it (``Overriding: n_embd = 96``); it then prints ``tokens per iteration will be: N`` and,
every iteration (one optimizer step over gradient_accumulation_steps micro-batches), ``iter N: loss X, time Yms,
mfu Z%`` with mfu against an A100's 312 TFLOP/s, -100% for the first five as nanoGPT does. With ``--data_ms=N``
each micro-batch comes from a DataLoader worker that spends N ms of CPU preparing it (an input pipeline that
starves the step); 0 makes them in the training loop. For gputop compare's end-to-end tests: two configurations
of it, or the same one before and after its input pipeline is fixed, are recorded and compared.
"""

from __future__ import annotations

import sys
import time
from ast import literal_eval

import torch
from torch.utils.data import DataLoader, Dataset

batch_size = 8
gradient_accumulation_steps = 2
block_size = 32
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 256
max_iters = 100_000
data_ms = 0
A100_PEAK_FLOPS = 312e12  # what nanoGPT's estimate_mfu divides by, whatever the machine


def apply_overrides(arguments: list[str]) -> None:
    for argument in arguments:
        key, _, text = argument.removeprefix("--").partition("=")
        if key not in globals() or not text:
            raise SystemExit(f"unknown setting {argument!r}")
        value = literal_eval(text)
        print(f"Overriding: {key} = {value}")
        globals()[key] = value


class SlowBatches(Dataset):
    """Each item is one micro-batch of random tokens that costs data_ms of CPU to make, like a heavy transform."""

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, index: int) -> torch.Tensor:
        deadline = time.thread_time() + data_ms / 1000
        while time.thread_time() < deadline:
            pass
        return torch.randint(vocab_size, (batch_size, block_size + 1))


def micro_batches():
    if data_ms > 0:
        yield from DataLoader(SlowBatches(), batch_size=None, num_workers=1, prefetch_factor=2)
    while True:
        yield torch.randint(vocab_size, (batch_size, block_size + 1))


class TinyGpt(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab_size, n_embd)
        self.positions = torch.nn.Embedding(block_size, n_embd)
        layer = torch.nn.TransformerEncoderLayer(n_embd, n_head, 4 * n_embd, dropout=0.0, batch_first=True,
                                                 norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = torch.nn.Linear(n_embd, vocab_size, bias=False)
        self.head.weight = self.tokens.weight  # tied, as GPT-2's lm_head

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        causal = torch.nn.Transformer.generate_square_subsequent_mask(tokens.shape[1])
        hidden = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1]))
        return self.head(self.blocks(hidden, mask=causal, is_causal=True))


def main() -> None:
    apply_overrides(sys.argv[1:])
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TinyGpt()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens_per_iter = gradient_accumulation_steps * batch_size * block_size
    print(f"tokens per iteration will be: {tokens_per_iter:,}")
    parameters = sum(p.numel() for p in model.parameters()) - model.positions.weight.numel()
    flops_per_token = 6 * parameters + 12 * n_layer * n_embd * block_size
    batches = micro_batches()
    last = time.time()
    for iteration in range(max_iters):
        for _ in range(gradient_accumulation_steps):
            batch = next(batches)
            logits = model(batch[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab_size), batch[:, 1:].reshape(-1))
            (loss / gradient_accumulation_steps).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        now = time.time()
        seconds, last = now - last, now
        mfu = flops_per_token * tokens_per_iter / seconds / A100_PEAK_FLOPS * 100 if iteration >= 5 else -100.0
        print(f"iter {iteration}: loss {loss.item():.4f}, time {seconds * 1000:.2f}ms, mfu {mfu:.2f}%", flush=True)


if __name__ == "__main__":
    main()
