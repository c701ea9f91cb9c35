#!/usr/bin/env python3
"""Issue 24's question: is Loom's higher training loss on a small text noise, or a difference?
The PyTorch 1.13 side of a seed-spread experiment (docs/nn.md, "Training parity with PyTorch").

The zoo GPT (4 layers, 4 heads, d 128, context 64, tied head, nanoGPT's initialisation), AdamW
lr 3e-3, weight decay 5e-4, cosine over the run, batch 32, 25 epochs, on the tokens of an HDF5
file in Loom's layout (make_dataset text). Windows:
  --windows fixed    non-overlapping windows of 64, shuffled each epoch;
  --windows blocks   train's default: 2T-token blocks every T tokens, a random T + 1 window in each.
Prints one JSON line per seed with the loss of every step. Loom's side is `train` with the same
flags (--log-every 1 writes every step's loss to metrics.jsonl).

    /usr/bin/python3 tests/nn/parity/gpt_seed_spread.py --data text.h5 --windows blocks --seeds 1 2
"""
import argparse
import json
import math
import os
import sys

import h5py
import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity_data import GPTModel  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--windows", choices=("fixed", "blocks"), default="blocks")
p.add_argument("--seeds", type=int, nargs="+", default=[1])
p.add_argument("--epochs", type=int, default=25)
a = p.parse_args()
torch.set_num_threads(2)
tokens = torch.from_numpy(h5py.File(a.data)["tokens"][:].astype("int64"))
vocab = len(h5py.File(a.data).attrs["vocab"])
T, B = 64, 32
for seed in a.seeds:
    torch.manual_seed(seed)
    model = GPTModel(vocab, T, 4, 4, 128)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=5e-4)
    n = (len(tokens) - 1) // T if a.windows == "fixed" else (len(tokens) - 2 * T) // T + 1
    steps_per_epoch = math.ceil(n / B)
    total = steps_per_epoch * a.epochs
    losses, step = [], 0
    for epoch in range(a.epochs):
        order = torch.randperm(n)
        for b in range(steps_per_epoch):
            idx = order[b * B:(b + 1) * B]
            starts = idx * T if a.windows == "fixed" else idx * T + torch.randint(0, T, (len(idx),))
            x = torch.stack([tokens[s:s + T] for s in starts.tolist()])
            y = torch.stack([tokens[s + 1:s + T + 1] for s in starts.tolist()])
            for g in opt.param_groups:
                g["lr"] = 3e-3 * 0.5 * (1 + math.cos(math.pi * step / total))
            loss = F.cross_entropy(model(x).view(-1, vocab), y.view(-1))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            step += 1
    print(json.dumps({"framework": "pytorch", "windows": a.windows, "seed": seed, "loss": losses}), flush=True)
