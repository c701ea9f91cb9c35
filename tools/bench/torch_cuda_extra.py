"""PyTorch side of `bench --device cuda` cases that torch_gpu_anchors.py does not cover, on the
same GPU and with the same shapes as tools/bench/cuda_cases.cpp: add of 2^28 float32, softmax and
layer norm of 8192 x 8192 bf16, matmul f32 4096 (TF32 off), the MLP training step at batch 128
and the small CNN's at batch 64 (each eager and replayed from a CUDA graph),
batch norm training forward + backward of [32, 64, 56, 56] float32 channels_last, GPT-2 small's
MLP block (768-3072-768, tanh GELU) in bf16 forward + backward over 8 x 1024 tokens.
Timed with CUDA events, median of 20 after warm-up. One JSON line per case.

    python3 tools/bench/torch_cuda_extra.py
"""
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

dev = "cuda"


def timed(fn, warm=5, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) / 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def emit(case, **kw):
    print(json.dumps({"case": case, **kw}), flush=True)


n = 1 << 28
a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
s = timed(lambda: torch.add(a, b))
emit("add_f32_256M", gbytes_per_s=round(3 * 4 * n / s / 1e9, 1))
del a, b
x = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
s = timed(lambda: torch.softmax(x, -1))
emit("softmax_bf16_8192", gbytes_per_s=round(2 * 2 * 8192 * 8192 / s / 1e9, 1))
w, bias = torch.ones(8192, device=dev, dtype=torch.bfloat16), torch.zeros(8192, device=dev, dtype=torch.bfloat16)
s = timed(lambda: F.layer_norm(x, (8192,), w, bias, 1e-5))
emit("layer_norm_bf16_8192", gbytes_per_s=round(2 * 2 * 8192 * 8192 / s / 1e9, 1))
torch.backends.cuda.matmul.allow_tf32 = False
p, q = torch.randn(4096, 4096, device=dev), torch.randn(4096, 4096, device=dev)
s = timed(lambda: p @ q)
emit("matmul_f32_4096", tflops=round(2 * 4096**3 / s / 1e12, 1))


def small_train(name, model, x, classes=10):
    """A small model's step (cross entropy, SGD momentum), eager and then under torch.cuda.graph
    (warm-up on a side stream, then capture), as cuda_mlp_train and cuda_mlp_train_graph run it."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    y = torch.randint(0, classes, (x.shape[0],), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    s = timed(step)
    emit(name, samples_per_s=round(x.shape[0] / s))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        F.cross_entropy(model(x), y).backward()
        opt.step()
    s = timed(graph.replay)
    emit(name + "_cudagraph", samples_per_s=round(x.shape[0] / s))


# The anchor's small CNN (torch_gpu_anchors.py), as cuda_cnn_train.
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 32, 5, padding=2), nn.Conv2d(32, 64, 5, padding=2)
        self.fc = nn.Linear(4096, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        return self.fc(F.max_pool2d(F.relu(self.c2(x)), 2).flatten(1))


mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
small_train("mlp_train_b128", mlp, torch.randn(128, 784, device=dev))
torch.backends.cudnn.benchmark = True  # cuDNN's autotuner: PyTorch's fastest setting for fixed shapes
small_train("cnn_train_b64", CNN().to(dev), torch.randn(64, 3, 32, 32, device=dev))
torch.backends.cudnn.benchmark = False
xb = torch.randn(32, 64, 56, 56, device=dev).contiguous(memory_format=torch.channels_last).requires_grad_()
gb = torch.randn(32, 64, 56, 56, device=dev).contiguous(memory_format=torch.channels_last)
wb, bb = torch.ones(64, device=dev, requires_grad=True), torch.zeros(64, device=dev, requires_grad=True)
rm, rv = torch.zeros(64, device=dev), torch.ones(64, device=dev)
s = timed(lambda: F.batch_norm(xb, rm, rv, wb, bb, training=True).backward(gb))
emit("batch_norm_train_f32_cl", images_per_s=round(32 / s))
block = nn.Sequential(nn.Linear(768, 3072), nn.GELU(approximate="tanh"), nn.Linear(3072, 768)).to(dev, torch.bfloat16)
xm = torch.randn(8, 1024, 768, device=dev, dtype=torch.bfloat16, requires_grad=True)
gm = torch.randn(8, 1024, 768, device=dev, dtype=torch.bfloat16)


def block_step():
    block.zero_grad(set_to_none=True)
    xm.grad = None
    block(xm).backward(gm)


s = timed(block_step)
emit("mlp_block_bf16", tokens_per_s=round(8 * 1024 / s))
