#!/usr/bin/env python3
"""
The PyTorch side of Loom's training-parity test (tests/nn/test_training_parity.cpp): PyTorch
chooses the initial weights and the batch order, trains, and writes down every step's loss;
the C++ test loads the same weights and batches into Loom, trains the same way and compares.

Run once with Debian's PyTorch (python3-torch, 1.13) from the repository root; its outputs are
committed, so CI needs no PyTorch:

    /usr/bin/python3 tests/nn/parity/make_parity_data.py

Inputs: Fashion-MNIST from Debian's dataset-fashion-mnist, and genesis.txt (Genesis 1-4 of the
King James Bible, from Debian's bible-kjv; written here the first time, if missing).
Outputs, in tests/nn/parity/:
  gpt_init.safetensors, cnn_init.safetensors   the initial weights, under Loom's names
  parity.json   the models, hyper-parameters, batch order, and per run the loss of every step
                in float32 ("loss") and in float64 from the same start ("loss_f64"); the two
                differ only by rounding, which measures how much float32 noise the run grows.

Both models follow Loom's zoo exactly: the GPT (nn/models/gpt.h: pre-LN blocks, qkv split as
[q | k | v] along the output features, exact GELU, tied head, nanoGPT's initialisation) at a size
small enough for CI, and SmallCNN(1, 10, 28) with PyTorch's default initialisation. Dropout is
off: the two frameworks draw different random numbers.
"""
import json
import math
import os
import re
import struct
import subprocess
import sys
import gzip

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
FASHION_LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"
STEPS = 200

GPT = {"context": 32, "n_layers": 2, "n_heads": 2, "d_model": 48, "batch": 8}
CNN = {"batch": 32}
# (optimizer, lr, weight decay, momentum, warm-up steps, clip): AdamW as in the run
# (lr 3e-3, weight decay 5e-4, cosine), SGD with momentum; a cosine schedule with linear warm-up
# from 0 (Loom's CosineWithWarmup), and gradient-norm clipping on two of the four runs.
RUNS = {
    "gpt": [
        {"name": "adamw", "optimizer": "adamw", "lr": 3e-3, "weight_decay": 5e-4, "warmup": 5, "clip": 1.0},
        {"name": "sgd", "optimizer": "sgd", "lr": 0.3, "momentum": 0.9, "weight_decay": 5e-4, "warmup": 5,
         "clip": 0.0},
    ],
    "cnn": [
        {"name": "adamw", "optimizer": "adamw", "lr": 1e-3, "weight_decay": 5e-4, "warmup": 5, "clip": 0.0},
        {"name": "sgd", "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4, "warmup": 5,
         "clip": 1.0},
    ],
}


def genesis_text():
    path = os.path.join(HERE, "genesis.txt")
    if not os.path.exists(path):
        out = subprocess.run(["bible", "-p", "/usr/lib", "-l100000", "Gen1:1-Gen4:26"], check=True,
                             capture_output=True, text=True).stdout
        verses = [m.group(1) for m in re.finditer(r"^\s+\d+ (.*)$", out, re.M)]
        with open(path, "w") as f:
            f.write("\n".join(verses) + "\n")
    with open(path) as f:
        return f.read()


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


# ---- the models, under Loom's parameter names ------------------------------------------------

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q * (C // self.heads) ** -0.5) @ k.transpose(-2, -1)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        att = att.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.proj((att @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(d), Attention(d, heads), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPTModel(nn.Module):
    def __init__(self, vocab, context, n_layers, n_heads, d_model):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d_model), nn.Embedding(context, d_model)
        self.blocks = nn.Sequential(*[Block(d_model, n_heads) for _ in range(n_layers)])
        self.ln = nn.LayerNorm(d_model)
        # nanoGPT's initialisation, as Loom's GPT: N(0, 0.02^2), residual projections scaled.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif ".ln" in name or name.startswith("ln"):
                nn.init.ones_(p)
            elif name.endswith("attn.proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layers))
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.ln(self.blocks(x)) @ self.tok.weight.t()  # the tied head


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
        self.fc = nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        return self.fc(x.flatten(1))


# ---- safetensors (float32, Hugging Face's layout) --------------------------------------------

def save_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


# ---- training ------------------------------------------------------------------------------------

def lr_at(step, run):
    """Loom's CosineWithWarmup(warmup, total=STEPS, min_lr=0, start_factor=0) at 0-based step."""
    if step < run["warmup"]:
        return run["lr"] * step / run["warmup"]
    progress = (step - run["warmup"]) / (STEPS - run["warmup"])
    return run["lr"] * 0.5 * (1.0 + math.cos(math.pi * progress))


def train(model, batches, run, dtype):
    model = model.to(dtype)
    params = list(model.parameters())
    if run["optimizer"] == "adamw":
        opt = torch.optim.AdamW(params, lr=run["lr"], weight_decay=run["weight_decay"])
    else:
        opt = torch.optim.SGD(params, lr=run["lr"], momentum=run["momentum"], weight_decay=run["weight_decay"])
    losses = []
    for step, (x, y) in enumerate(batches):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, run)
        logits = model(x.to(dtype) if x.is_floating_point() else x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if run["clip"] > 0:
            torch.nn.utils.clip_grad_norm_(params, run["clip"])
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    torch.manual_seed(2024)
    torch.set_num_threads(1)  # one thread: PyTorch's own reductions in a fixed order
    g = torch.Generator().manual_seed(7)

    text = genesis_text()
    vocab = sorted(set(text))
    tokens = torch.tensor([vocab.index(c) for c in text], dtype=torch.int64)
    T, B = GPT["context"], GPT["batch"]
    starts = torch.randint(0, len(tokens) - T, (STEPS, B), generator=g)
    gpt_batches = [(torch.stack([tokens[s:s + T] for s in row]), torch.stack([tokens[s + 1:s + T + 1] for s in row]))
                   for row in starts.tolist()]
    gpt = GPTModel(len(vocab), T, GPT["n_layers"], GPT["n_heads"], GPT["d_model"])
    gpt_init = {k: v.clone() for k, v in gpt.state_dict().items()}

    images, labels = read_idx(FASHION), read_idx(FASHION_LABELS)
    order = torch.randperm(len(images), generator=g)[:STEPS * CNN["batch"]].view(STEPS, CNN["batch"])
    cnn_batches = [(torch.from_numpy(images[row].copy()).float().div(255).unsqueeze(1),
                    torch.from_numpy(labels[row].astype(np.int64))) for row in order.numpy()]
    cnn = SmallCNN()
    cnn_init = {k: v.clone() for k, v in cnn.state_dict().items()}

    save_safetensors(os.path.join(HERE, "gpt_init.safetensors"), gpt_init)
    save_safetensors(os.path.join(HERE, "cnn_init.safetensors"), cnn_init)

    out = {"generator": f"tests/nn/parity/make_parity_data.py, PyTorch {torch.__version__}", "steps": STEPS,
           "gpt": dict(GPT, vocab_size=len(vocab), text="genesis.txt", starts=starts.tolist(), runs=[]),
           "cnn": dict(CNN, images=FASHION, labels=FASHION_LABELS, indices=order.tolist(), runs=[])}
    for key, model, init, batches in (("gpt", gpt, gpt_init, gpt_batches), ("cnn", cnn, cnn_init, cnn_batches)):
        for run in RUNS[key]:
            result = dict(run)
            for dtype, field in ((torch.float32, "loss"), (torch.float64, "loss_f64")):
                model.load_state_dict(init)
                result[field] = train(model, batches, run, dtype)
            gap = max(abs(a - b) for a, b in zip(result["loss"], result["loss_f64"]))
            print(f"{key} {run['name']}: loss {result['loss'][0]:.4f} -> {result['loss'][-1]:.4f}, "
                  f"max |f32 - f64| {gap:.2e}", file=sys.stderr)
            out[key]["runs"].append(result)
    with open(os.path.join(HERE, "parity.json"), "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
