"""PyTorch side of the bench cases that ../shared/anchors/ does not cover: add_f32_16M,
copy_f32_16M (torch's own copy_) and softmax_f32_4096x4096, measured like the anchors.

    /usr/bin/python3 tools/bench/torch_extra.py --threads 2
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "anchors"))
import torch  # noqa: E402

from common import bench_name, emit, measure, setup  # noqa: E402

args = setup(__doc__)
n = 16 << 20
a, b, c = torch.randn(n), torch.randn(n), torch.empty(n)
m = measure(lambda: torch.add(a, b, out=c), args)
emit(args, bench_name(), "add_f32_16M out=", m, gbytes_per_s=round(3 * 4 * n / m["sec"] / 1e9, 1))
m = measure(lambda: torch.add(a, b), args)
emit(args, bench_name(), "add_f32_16M", m, gbytes_per_s=round(3 * 4 * n / m["sec"] / 1e9, 1))
m = measure(lambda: c.copy_(a), args)
emit(args, bench_name(), "copy_f32_16M", m, gbytes_per_s=round(2 * 4 * n / m["sec"] / 1e9, 1))
x = torch.randn(4096, 4096)
m = measure(lambda: torch.softmax(x, -1), args)
emit(args, bench_name(), "softmax_f32_4096x4096", m, gbytes_per_s=round(2 * 4 * 4096 * 4096 / m["sec"] / 1e9, 1))
