"""PyTorch side of the bench cases that ../shared/anchors/ does not cover: add_f32_16M,
copy_f32_16M (torch's own copy_), softmax_f32_4096x4096{,_dim0}, sum_f32_4096x4096_{rows,cols},
gelu_tanh_f32_16M, layer_norm_f32_8192x768,
{sgd,adamw}_step_f32_4M, batch_norm_train_f32_32x64x32x32{,_cl}, predict_cnn_{f32,int8}_b{256,1} and {mlp,cnn}_train_bf16, measured
like the anchors.

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
m = measure(lambda: torch.softmax(x, 0), args)
emit(args, bench_name(), "softmax_f32_4096x4096_dim0", m, gbytes_per_s=round(2 * 4 * 4096 * 4096 / m["sec"] / 1e9, 1))
for name, dim in (("sum_f32_4096x4096_rows", 1), ("sum_f32_4096x4096_cols", 0)):
    m = measure(lambda: torch.sum(x, dim), args)
    emit(args, bench_name(), name, m, gbytes_per_s=round(4 * 4096 * 4096 / m["sec"] / 1e9, 1))

# gelu_tanh_f32_16M: the GELU forward and its backward kernel (torch.ops.aten.gelu_backward);
# layer_norm_f32_8192x768: aten's layer norm forward and backward kernels, as tools/bench/cases.cpp.
g = torch.randn(n)
m = measure(lambda: (torch.nn.functional.gelu(a, approximate="tanh"),
                     torch.ops.aten.gelu_backward(g, a, approximate="tanh")), args)
emit(args, bench_name(), "gelu_tanh_f32_16M", m, gbytes_per_s=round(5 * 4 * n / m["sec"] / 1e9, 1))
xl, gl, wl, bl = torch.randn(8192, 768), torch.randn(8192, 768), torch.randn(768), torch.randn(768)


def layer_norm_step():
    y, mean, rstd = torch.ops.aten.native_layer_norm(xl, [768], wl, bl, 1e-5)
    torch.ops.aten.native_layer_norm_backward(gl, xl, [768], mean, rstd, wl, bl, [True, True, True])


m = measure(layer_norm_step, args)
emit(args, bench_name(), "layer_norm_f32_8192x768", m, gbytes_per_s=round(5 * 4 * 8192 * 768 / m["sec"] / 1e9, 1))

# batch_norm_train_f32_32x64x32x32{,_cl}: batch norm training forward (running statistics
# updated) and backward (input, weight and bias gradients), NCHW and channels_last, as
# tools/bench/cases.cpp; images/s = 32 / s.
for suffix, fmt in (("", torch.contiguous_format), ("_cl", torch.channels_last)):
    xb = torch.randn(32, 64, 32, 32).contiguous(memory_format=fmt).requires_grad_()
    gb = torch.randn(32, 64, 32, 32).contiguous(memory_format=fmt)
    wb, bb = torch.ones(64, requires_grad=True), torch.zeros(64, requires_grad=True)
    rm, rv = torch.zeros(64), torch.ones(64)

    def bn_step():
        torch.nn.functional.batch_norm(xb, rm, rv, wb, bb, training=True).backward(gb)

    m = measure(bn_step, args)
    emit(args, bench_name(), "batch_norm_train_f32_32x64x32x32" + suffix, m, images_per_s=round(32 / m["sec"]))

# sgd_step_f32_4M, adamw_step_f32_4M: one optimizer step over 16 x 256K float32 parameters with
# gradients, as tools/bench/nn_cases.cpp; foreach (the default) and, where this PyTorch has it on
# the CPU (2.4 and later), fused. GB/s counts 5 x 4 (SGD momentum) and 7 x 4 (AdamW) bytes a parameter.
params = [torch.randn(1 << 18, requires_grad=True) for _ in range(16)]
for p in params:
    p.grad = torch.randn(1 << 18)
for name, make, bytes_per_param in (
        ("sgd_step_f32_4M", lambda **kw: torch.optim.SGD(params, lr=0.01, momentum=0.9, **kw), 5 * 4),
        ("adamw_step_f32_4M", lambda **kw: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.01, **kw), 7 * 4)):
    for variant, kw in (("foreach", {"foreach": True}), ("fused", {"fused": True})):
        try:
            opt = make(**kw)
            opt.step()
        except (RuntimeError, TypeError, ValueError) as e:  # no CPU fused step in this PyTorch
            print(f"# {name} {variant}: {e}".splitlines()[0], file=sys.stderr)
            continue
        m = measure(opt.step, args)
        emit(args, bench_name(), f"{name} {variant}", m,
             gbytes_per_s=round(bytes_per_param * 16 * (1 << 18) / m["sec"] / 1e9, 1))

# predict_cnn_{f32,int8}_b{256,1}: PyTorch's side of tools/bench/predict_cases.cpp — the SmallCNN
# of models.py (3x32x32, as Loom's SmallCNN(3, 10, 32)) in eval and torch.inference_mode(), f32 and
# INT8 by FX static post-training quantization with the onednn engine (as int8.py does; this
# Debian build has no fbgemm). Forward only: no loading, no writing. samples_per_s = batch / s.
import copy  # noqa: E402

from torch.ao.quantization import get_default_qconfig_mapping  # noqa: E402
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx  # noqa: E402

from models import SmallCNN  # noqa: E402

cnn = SmallCNN().eval()
torch.backends.quantized.engine = "onednn"
prepared = prepare_fx(copy.deepcopy(cnn), get_default_qconfig_mapping("onednn"), (torch.randn(64, 3, 32, 32),))
with torch.inference_mode():
    for _ in range(4):
        prepared(torch.randn(64, 3, 32, 32))
cnn_int8 = convert_fx(prepared)
for kind, model in (("f32", cnn), ("int8", cnn_int8)):
    for batch in (256, 1):
        x = torch.randn(batch, 3, 32, 32)
        with torch.inference_mode():
            m = measure(lambda: model(x), args)
        emit(args, bench_name(), f"predict_cnn_{kind}_b{batch}", m, samples_per_s=round(batch / m["sec"], 1))

# mlp_train_bf16, cnn_train_bf16: the anchors' MLP and SmallCNN training steps (mlp_train.py,
# cnn_train.py) with the forward and loss under torch.autocast("cpu", torch.bfloat16), backward and
# step outside it, as tools/bench/nn_cases.cpp. samples_per_s = batch / s.
from torch.nn import functional as F  # noqa: E402

from models import mlp  # noqa: E402

for name, model, x in (("mlp_train_bf16", mlp(), torch.randn(128, 784)),
                       ("cnn_train_bf16", SmallCNN(), torch.randn(64, 3, 32, 32))):
    y = torch.randint(0, 10, (x.shape[0],))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    m = measure(step, args)
    emit(args, bench_name(), name, m, samples_per_s=round(x.shape[0] / m["sec"]))
