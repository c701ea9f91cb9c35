/*
 * The bench cases. Shapes and metrics match the PyTorch anchors in ../shared/anchors/ so
 * that both sides run the same workload:
 *   matmul_f32_N        C = A B, square N x N float32, GFLOP/s = 2 N^3 / t
 *   matmul_bf16_N       the same in bfloat16 (float32 accumulation), as torch.mm on bf16
 *                       tensors (../shared/anchors/matmul.py, case "bf16 N^3")
 *   add_f32_16M         c = a + b over 16M float32, GB/s = 3 * 4 * 16M / t (2 reads, 1 write)
 *   copy_f32_16M        the reference bandwidth: a plain parallel copy loop b[i] = a[i],
 *                       GB/s = 2 * 4 * 16M / t; add should reach >= 80% of it
 *   conv_CtoK_b32       conv 3x3, padding 1, batch 32, 32x32 input: forward + backward to
 *                       the input + backward to weight and bias, images/s
 *   conv_3to64_b32_first_layer  the same without the input gradient (a first layer), as the
 *                       PyTorch anchor measures its 3->64 case
 *   conv_*_cl           the same with channels_last (NHWC-strided) activations
 *   softmax_f32_4096x4096  softmax over the last dim, GB/s = 2 * 4 * 4096^2 / t
 *   parallel_region     microseconds per fork and join of the pool (the cost model's fixed cost)
 *   add_f32_64K         an add of two grains: the smallest add the cost model splits
 *   linear_f32_128xINxOUT  the MLP's layers at batch 128, GFLOP/s = 2 * 128 * IN * OUT / t
 *   sum_f32_4096x4096_{rows,cols}  sum over dim 1 (a row each) and dim 0 (a bias gradient's
 *                       shape), GB/s = 4 * 4096^2 / t
 */
#include <omp.h>

#include <atomic>
#include <utility>

#include "ops/ops.h"
#include "tools/bench/bench.h"

namespace loom::bench {

namespace {

constexpr int64_t n16m = int64_t{16} << 20;

BenchCase matmul_case(int64_t n, DType dtype) {
  const std::string type = dtype == kBFloat16 ? "bf16" : "f32";
  return {"matmul_" + type + "_" + std::to_string(n), "gflops", "GFLOP/s", 1e9,
          "square " + std::string(dtype == kBFloat16 ? "bfloat16" : "float32") + " matmul C = A B of size " +
              std::to_string(n),
          [n, dtype] {
            Tensor a = randn({n, n}).to(dtype), b = randn({n, n}).to(dtype);
            return Workload{[a, b] { (void)matmul(a, b); }, 2.0 * n * n * n};
          }};
}

// with_grad_input = false is a first layer, whose input needs no gradient: the workload of
// the PyTorch anchor's 3->64 case (../shared/anchors/conv.py).
// channels_last: activations stored NHWC (NCHW sizes with NHWC strides), as PyTorch's
// channels_last memory format; oneDNN then needs no layout reorders for them.
BenchCase conv_case(int64_t cin, int64_t cout, bool with_grad_input, bool channels_last) {
  std::string name = "conv_" + std::to_string(cin) + "to" + std::to_string(cout) + "_b32" +
                     (with_grad_input ? "" : "_first_layer") + (channels_last ? "_cl" : "");
  std::string what = with_grad_input ? "forward + grad input + grad weight and bias" : "forward + grad weight and bias";
  return {name, "images_per_s", "images/s", 1,
          "conv2d 3x3 pad 1, batch 32, 32x32, " + what + (channels_last ? ", channels_last" : ""),
          [cin, cout, with_grad_input, channels_last] {
            const int64_t batch = 32;
            auto activation = [channels_last](int64_t n, int64_t c) {
              Tensor t = randn({n, c, 32, 32});
              if (!channels_last) return t;
              Tensor nhwc = empty({n, 32, 32, c}).permute({0, 3, 1, 2});
              nhwc.copy_(t);
              return nhwc;
            };
            Tensor x = activation(batch, cin);
            Tensor w = randn({cout, cin, 3, 3}).mul(0.1), b = randn({cout});
            Tensor grad_out = activation(batch, cout);
            Conv2dParams p;
            p.padding = {1, 1};
            return Workload{[=] {
                              (void)conv2d(x, w, b, p.stride, p.padding, p.dilation, p.groups);
                              if (with_grad_input) (void)conv2d_backward_input(grad_out, w, x.sizes(), p);
                              (void)conv2d_backward_weight(grad_out, x, w.sizes(), true, p);
                            },
                            static_cast<double>(batch)};
          }};
}

// batch_norm training forward (batch statistics, running statistics updated) and its backward
// (input, weight and bias gradients) of x [32, 64, 32, 32] float32, a ResNet stage's activation;
// channels_last keeps x, the output and the gradient NHWC (ops/memory_format.h).
BenchCase batch_norm_case(bool channels_last) {
  return {std::string("batch_norm_train_f32_32x64x32x32") + (channels_last ? "_cl" : ""),
          "images_per_s",
          "images/s",
          1,
          std::string("batch_norm forward (training) + backward, float32 [32, 64, 32, 32]") +
              (channels_last ? ", channels_last" : ""),
          [channels_last] {
            const int64_t n = 32, c = 64;
            auto activation = [=] {
              Tensor t = randn({n, c, 32, 32});
              return channels_last ? contiguous(t.permute({0, 2, 3, 1})).permute({0, 3, 1, 2}) : t;
            };
            Tensor x = activation(), grad_out = activation();
            Tensor w = ones({c}), b = zeros({c}), rm = zeros({c}), rv = ones({c});
            return Workload{[=] {
                              auto [y, mean, invstd] = batch_norm_forward(x, w, b, rm, rv, true, 0.1, 1e-5);
                              (void)batch_norm_backward(grad_out, x, w, mean, invstd);
                            },
                            static_cast<double>(n)};
          }};
}

// linear(x, w, b) with x [batch, in] and w [out, in]: the MLP's layer shapes, small products whose
// thread count the cost model chooses (core/parallel.h, ops/cpu/onednn_utils.h's ProductTeam).
BenchCase linear_case(int64_t batch, int64_t in, int64_t out) {
  const std::string shape = std::to_string(batch) + "x" + std::to_string(in) + "x" + std::to_string(out);
  return {"linear_f32_" + shape,
          "gflops",
          "GFLOP/s",
          1e9,
          "linear(x, w, b) float32, x [batch, in] x w^T, " + shape,
          [batch, in, out] {
            Tensor x = randn({batch, in}), w = randn({out, in}), b = randn({out});
            return Workload{[x, w, b] { (void)linear(x, w, b); }, 2.0 * batch * in * out};
          }};
}

// The cost of one parallel region: parallel_for over one item per thread with a grain of one
// item, so that every thread of the pool is woken, runs nothing, and joins.
BenchCase parallel_region_case() {
  return {"parallel_region", "us", "fork and join of the thread pool: one parallel_for region doing no work",
          [](const TimingOptions& options) {
            std::atomic<int64_t> sink{0};
            const int64_t items = get_num_threads();
            Timing t = time_median(
                [&] {
                  parallel_for(0, items, 1, [&](int64_t b, int64_t e) {
                    sink.fetch_add(e - b, std::memory_order_relaxed);
                  });
                },
                options);
            return std::vector<Metric>{{"us_per_region", t.seconds_per_call * 1e6, "us"}};
          }};
}

}  // namespace

std::vector<BenchCase> op_cases() {
    std::vector<BenchCase> c;
    for (int64_t n : {256, 1024, 2048}) c.push_back(matmul_case(n, kFloat32));
    for (int64_t n : {256, 1024, 2048}) c.push_back(matmul_case(n, kBFloat16));
    c.push_back({"add_f32_16M", "gbytes_per_s", "GB/s", 1e9, "c = a + b, 16M float32 (3 x 64 MiB of traffic)", [=] {
                   Tensor a = randn({n16m}), b = randn({n16m});
                   return Workload{[a, b] { (void)add(a, b); }, 3.0 * 4 * n16m};
                 }});
    c.push_back({"copy_f32_16M", "gbytes_per_s", "GB/s", 1e9,
                 "reference bandwidth: plain OpenMP copy loop b[i] = a[i], 16M float32", [=] {
                   Tensor a = randn({n16m}), b = empty({n16m});
                   const float* src = a.data_ptr<float>();
                   float* dst = b.data_ptr<float>();
                   return Workload{[a, b, src, dst] {
#pragma omp parallel for schedule(static)
                                     for (int64_t i = 0; i < n16m; ++i) dst[i] = src[i];
                                   },
                                   2.0 * 4 * n16m};
                 }});
    for (bool channels_last : {false, true}) {
      c.push_back(conv_case(3, 64, /*with_grad_input=*/true, channels_last));
      c.push_back(conv_case(3, 64, /*with_grad_input=*/false, channels_last));
      c.push_back(conv_case(64, 64, /*with_grad_input=*/true, channels_last));
    }
    for (bool channels_last : {false, true}) c.push_back(batch_norm_case(channels_last));
    c.push_back(parallel_region_case());
    c.push_back({"add_f32_64K", "gbytes_per_s", "GB/s", 1e9,
                 "c = a + b over 64K float32 (two grains of the cost model: split once on 2+ threads)", [] {
                   Tensor a = randn({int64_t{1} << 16}), b = randn({int64_t{1} << 16});
                   return Workload{[a, b] { (void)add(a, b); }, 3.0 * 4 * (int64_t{1} << 16)};
                 }});
    for (auto [in, out] : {std::pair<int64_t, int64_t>{784, 512}, {512, 512}, {512, 10}})
      c.push_back(linear_case(128, in, out));
    c.push_back({"softmax_f32_4096x4096", "gbytes_per_s", "GB/s", 1e9, "softmax over the last dim of 4096 x 4096 float32",
                 [] {
                   Tensor x = randn({4096, 4096});
                   return Workload{[x] { (void)softmax(x, -1); }, 2.0 * 4 * 4096 * 4096};
                 }});
    c.push_back({"softmax_f32_4096x4096_dim0", "gbytes_per_s", "GB/s", 1e9,
                 "softmax over the first dim of 4096 x 4096 float32 (blocks of columns)", [] {
                   Tensor x = randn({4096, 4096});
                   return Workload{[x] { (void)softmax(x, 0); }, 2.0 * 4 * 4096 * 4096};
                 }});
    // Eigen-based kernels (ops/cpu/array_kernels.h), the GELU and layer norm of a GPT block.
    c.push_back({"gelu_tanh_f32_16M", "gbytes_per_s", "GB/s", 1e9,
                 "y = gelu(x, tanh) and its backward gx = gelu_backward(g, x), 16M float32 (5 x 64 MiB)",
                 [=] {
                   Tensor x = randn({n16m}), g = randn({n16m});
                   return Workload{[x, g] {
                                     (void)gelu(x, "tanh");
                                     (void)gelu_backward(g, x, "tanh");
                                   },
                                   5.0 * 4 * n16m};
                 }});
    c.push_back(
        {"layer_norm_f32_8192x768", "gbytes_per_s", "GB/s", 1e9,
         "layer_norm over rows of 768 with weight and bias, forward and backward (x, gy in; y, gx out)", [] {
           Tensor x = randn({8192, 768}), gy = randn({8192, 768}), w = randn({768}), b = randn({768});
           return Workload{[x, gy, w, b] {
                             auto [y, mean, rstd] = layer_norm_forward(x, {768}, w, b, 1e-5);
                             (void)layer_norm_backward(gy, x, {768}, mean, rstd, w);
                           },
                           5.0 * 4 * 8192 * 768};
         }});
    for (int64_t dim : {1, 0})
      c.push_back({std::string("sum_f32_4096x4096_") + (dim == 1 ? "rows" : "cols"), "gbytes_per_s", "GB/s",
                   1e9, "sum of 4096 x 4096 float32 over dim " + std::to_string(dim), [dim] {
                     Tensor x = randn({4096, 4096});
                     return Workload{[x, dim] { (void)x.sum({dim}); }, 4.0 * 4096 * 4096};
                   }});
    return c;
}

}  // namespace loom::bench
