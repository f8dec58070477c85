"""Target: a Hugging Face Trainer job starved by its Dataset (CPU, a tiny GPT-2 built from a config, nothing
downloaded): every sample takes SAMPLE_S in __getitem__ (a slow read or decode), read by one DataLoader worker,
so the training loop waits for batches. Trainer draws its tqdm bar on stderr even when stderr is not a
terminal; run it with stderr to a file, as ``python train.py > log 2>&1`` does. It runs until it is killed.
"""

from __future__ import annotations

import sys
import time

import torch
from torch.utils.data import Dataset
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

SAMPLE_S = 0.05
BATCH = 4
SEQUENCE = 16


class SlowTokens(Dataset):
    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        time.sleep(SAMPLE_S)
        tokens = torch.randint(0, 64, (SEQUENCE,))
        return {"input_ids": tokens, "labels": tokens}


def main() -> None:
    torch.set_num_threads(1)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=SEQUENCE, n_embd=32, n_layer=1, n_head=2))
    args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=BATCH, max_steps=1_000_000,
                             dataloader_num_workers=1, report_to="none", save_strategy="no", use_cpu=True)
    Trainer(model=model, args=args, train_dataset=SlowTokens()).train()


if __name__ == "__main__":
    main()
