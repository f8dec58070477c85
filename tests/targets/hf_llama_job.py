"""Target: a plain PyTorch loop training a tiny Llama built from the config.json in the folder named on its
command line (transformers' LlamaForCausalLM, CPU, random tokens, nothing downloaded), as a job that trains
a Hugging Face model from its model directory does. It prints ``step N | loss X`` after each optimizer step
(no time: the reader times the lines) and runs until it is killed. The second form names its model folder
and sizes the way transformers' run_clm.py does, for gputop to find the config.json from the command line.

usage: hf_llama_job.py MODEL_DIR BATCH SEQUENCE
       hf_llama_job.py --model_name_or_path MODEL_DIR --per_device_train_batch_size BATCH --block_size SEQUENCE
"""

from __future__ import annotations

import argparse
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main() -> None:
    if sys.argv[1].startswith("--"):
        parser = argparse.ArgumentParser()
        parser.add_argument("--model_name_or_path", required=True)
        parser.add_argument("--per_device_train_batch_size", type=int, required=True)
        parser.add_argument("--block_size", type=int, required=True)
        args = parser.parse_args()
        model_dir, batch, sequence = args.model_name_or_path, args.per_device_train_batch_size, args.block_size
    else:
        model_dir, batch, sequence = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    print("ready", file=sys.stderr, flush=True)
    step = 0
    while True:
        tokens = torch.randint(0, model.config.vocab_size, (batch, sequence))
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        print(f"step {step} | loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
