"""Synthetic tokens for karpathy/nanoGPT's train.py, as the H200 fixtures were made (tests/fixtures/h200/README.md):
``data/<dataset>/train.bin`` and ``val.bin``, the flat uint16 token arrays train.py memory-maps, drawn uniformly
from GPT-2's 50,257 tokens. No ``meta.pkl``: train.py then uses its default vocabulary of 50,304 (50,257 rounded
up), as on those runs. With ``--vocab N`` (the GPU check's CPU dry run: a tiny model's logits) the tokens are drawn
from N and a ``meta.pkl`` tells train.py so, as nanoGPT's own shakespeare_char/prepare.py does.

    python benchmarks/synthetic_tokens.py NANOGPT_DIR [--dataset synthetic] [--tokens 2097152] [--vocab N]

The tokens' values do not matter to a step's speed (every step does the same work whatever they are); only the
file must hold more than one block, since train.py picks each sequence at a random offset.
"""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path

import numpy as np

GPT2_TOKENS = 50_257  # GPT-2's vocabulary; nanoGPT's model rounds it up to 50,304
DEFAULT_TOKENS = 1 << 21  # 4 MiB per file: far more than a block, small enough to make in a moment


def write_dataset(nanogpt_dir: Path, dataset: str = "synthetic", tokens: int = DEFAULT_TOKENS,
                  vocab: int | None = None, seed: int = 0) -> Path:
    """Write data/<dataset>/{train,val}.bin under nanogpt_dir (and meta.pkl where vocab is given); returns that
    folder."""
    folder = Path(nanogpt_dir) / "data" / dataset
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "meta.pkl").unlink(missing_ok=True)
    generator = np.random.default_rng(seed)
    for split in ("train", "val"):
        generator.integers(0, vocab or GPT2_TOKENS, size=tokens, dtype=np.uint16).tofile(folder / f"{split}.bin")
    if vocab is not None:
        with (folder / "meta.pkl").open("wb") as meta:
            pickle.dump({"vocab_size": vocab}, meta)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("nanogpt_dir", type=Path)
    parser.add_argument("--dataset", default="synthetic")
    parser.add_argument("--tokens", type=int, default=DEFAULT_TOKENS)
    parser.add_argument("--vocab", type=int, help="draw from this many tokens and write meta.pkl saying so")
    args = parser.parse_args()
    print(write_dataset(args.nanogpt_dir, args.dataset, args.tokens, args.vocab))


if __name__ == "__main__":
    main()
