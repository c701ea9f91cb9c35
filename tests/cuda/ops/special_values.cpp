/*
 * NaN and infinities through the CUDA kernels that fuse several steps: cuBLASLt's epilogues
 * (linear_activation and its backward), the row kernels (softmax, log_softmax, layer_norm), batch
 * norm's per-channel passes, the loss, the fused attention, convolution, pooling by averages, the
 * reductions inside var and mean, and the fused optimizer steps. In each, a NaN or an infinity
 * in the input must give NaN or the same infinity at the same places as the CPU, forward and
 * backward, as PyTorch's kernels do.
 *
 * These are the places where a max(x, 0), an fmaxf or a clamp inside one fused step can quietly
 * turn a NaN into a number. cuBLASLt's RELU epilogue does exactly that (relu(NaN) is 0 there, as
 * its users report): while linear_activation used it, a model whose weights went NaN trained on
 * with finite losses on the GPU and stopped on the CPU. The flash attention's `l > 0` tests made
 * a NaN row 0 on the CPU and gave it zero gradients on CUDA. The elementwise ops, max/min
 * reductions, max pooling, clamp and the AMP check have special-value cases in their own files.
 */
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::cuda_float_dtypes;
using test::CudaCase;
using test::label;
using test::pat;

#if defined(LOOM_CUDA_EMULATED)  // defined by the emulated cuda_runtime_api.h (through cuda_test_util.h)
constexpr bool kEmulated = true;
#else
constexpr bool kEmulated = false;
#endif

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = test::kInf;

// pat(shape, seed, scale) with `specials` written at flat positions, in dtype dt.
Tensor with_specials(IntArrayRef shape, double seed, const std::vector<std::pair<int64_t, double>>& specials,
                     DType dt, double scale = 1.0) {
  Tensor t = pat(shape, seed, scale).to(kFloat64);
  Tensor flat = t.view({-1});
  for (const auto& [at, v] : specials) flat.narrow(0, at, 1).fill_(v);
  return t.to(dt);
}

// gpu keeps every NaN and infinity of cpu (a NaN, or the same infinity, where cpu has one); it may
// hold more NaNs; its other values are cpu's within tol.
void check_keeps_specials(const Tensor& gpu, const Tensor& cpu, test::Tol tol, const std::string& what) {
  const std::vector<double> g = gpu.to(kCPU).to_vector<double>(), c = cpu.to_vector<double>();
  REQUIRE(g.size() == c.size());
  int64_t lost = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i])) continue;  // a NaN may spread; it is never lost
    const bool ok = std::isnan(c[i])   ? false
                    : std::isinf(c[i]) ? g[i] == c[i]
                                       : std::abs(g[i] - c[i]) <= tol.atol + tol.rtol * std::abs(c[i]);
    lost += !ok;
  }
  CHECK_MESSAGE(lost == 0, what, ": ", lost, " of ", g.size(), " values lost a NaN or an infinity, or differ");
}

TEST_CASE("special values: linear_activation keeps NaN through relu and the GELUs, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      INFO(label(dt, " activation ", static_cast<int>(act)));
      // A NaN in x's row 0 makes all of out's row 0 NaN; a NaN weight makes out's column 3 NaN;
      // +inf in x's row 2 makes row 2 +-inf by the weights' signs, which relu keeps or zeroes.
      // Width 8: the fused path where cuBLASLt has one (the GELU input kept as its aux matrix).
      const Tensor x = with_specials({4, 6}, 0.1, {{1, kNan}, {13, kInf}}, dt);
      const Tensor w = with_specials({8, 6}, 0.2, {{3 * 6 + 2, kNan}}, dt);
      const Tensor b = pat({8}, 0.3).to(dt);
      CudaCase c;
      if ((dt == kBFloat16 || dt == kFloat16) && act != Activation::Relu)
        c.tol =
            test::Tol{test::cuda_tol_for(dt).rtol, 1e-3};  // the epilogue rounds once (linear_activation.cpp)
      check_cuda_matches_cpu(
          [act](const std::vector<Tensor>& in) { return linear_activation(in[0], in[1], in[2], act); },
          {x, w, b}, c);
      // The MLP block as nn::Sequential runs it: Linear, activation, Linear in one op.
      const Tensor w2 = pat({5, 8}, 0.4).to(dt), b2 = pat({5}, 0.5).to(dt);
      check_cuda_matches_cpu(
          [act](const std::vector<Tensor>& in) {
            return linear_activation_linear(in[0], in[1], in[2], in[3], in[4], act);
          },
          {x, w, b, w2, b2}, c);
    }
  }
}

TEST_CASE("special values: linear_input_grad_activation keeps a NaN gradient and a NaN pre-activation") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
      INFO(label(dt, " activation ", static_cast<int>(act)));
      CudaCase c;
      c.backward = false;
      if ((dt == kBFloat16 || dt == kFloat16) && act != Activation::Relu)
        c.tol = test::Tol{test::cuda_tol_for(dt).rtol, dt == kBFloat16 ? 2e-2 : 2e-3};
      // grad [6, 4] with a NaN, weight2 [4, 8], the pre-activation [6, 8] with a NaN and an inf
      // (relu's gradient passes where hidden is NaN, as threshold_backward does).
      check_cuda_matches_cpu(
          [act](const std::vector<Tensor>& in) {
            Tensor hidden = in[2].relu(), pre = act == Activation::Relu ? Tensor() : in[2];
            auto [grad_pre, grad_bias] = linear_input_grad_activation(in[0], in[1], pre, hidden, act, true);
            return std::vector<Tensor>{grad_pre, grad_bias};
          },
          {with_specials({6, 4}, 3.4, {{5, kNan}}, dt), pat({4, 8}, 3.5).to(dt),
           with_specials({6, 8}, 3.6, {{20, kNan}, {33, kInf}, {41, -kInf}}, dt)},
          c);
    }
  }
}

TEST_CASE("special values: matmul and bmm give NaN and infinities where the CPU does") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    INFO(dt);
    // inf * 0 is NaN, inf + -inf is NaN, inf times positive and negative weights is +-inf.
    const Tensor a = with_specials({2, 3, 5}, 0.6, {{0, kInf}, {7, kNan}, {12, -kInf}, {13, kInf}}, dt);
    const Tensor b = with_specials({2, 5, 4}, 0.7, {{1, 0.0}, {30, kNan}}, dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }, {a, b});
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); },
                           {a.select(0, 0), with_specials({4, 5}, 0.8, {{6, kInf}}, dt),
                            with_specials({4}, 0.9, {{2, kNan}}, dt)});
  }
}

TEST_CASE("special values: softmax and log_softmax rows with NaN, +inf and all -inf") {
  LOOM_REQUIRE_GPU();
  // Row 0 holds a NaN (the whole row is NaN), row 1 a +inf (inf - inf: NaN), row 2 -inf only
  // (0/0: NaN), row 3 a -inf among numbers (probability exactly 0). Rows of 7: a warp a row;
  // rows of 1500: a block a row; the transposed view: along a non-last dim.
  for (int64_t width : {7, 1500}) {
    std::vector<std::pair<int64_t, double>> specials{{3, kNan}, {width + 2, kInf}, {3 * width + 1, -kInf}};
    for (int64_t j = 0; j < width; ++j) specials.push_back({2 * width + j, -kInf});
    for (DType dt : cuda_float_dtypes()) {
      const Tensor x = with_specials({4, width}, 0.3, specials, dt, 3.0);
      for (bool log : {false, true}) {
        INFO(label(dt, " width ", width, (log ? " log_softmax" : " softmax")));
        auto f = [log](const Tensor& t, int64_t dim) { return log ? log_softmax(t, dim) : softmax(t, dim); };
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return f(in[0], 1); }, {x});
        if (width == 7)
          check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return f(in[0].t(), 0); }, {x});
      }
    }
  }
}

TEST_CASE("special values: layer_norm rows with a NaN or an infinity are NaN, the others untouched") {
  LOOM_REQUIRE_GPU();
  for (int64_t width : {10, 1500}) {
    for (DType dt : cuda_float_dtypes()) {
      INFO(label(dt, " width ", width));
      const Tensor x = with_specials({3, width}, 0.7, {{4, kNan}, {width + 9, kInf}}, dt, 3.0);
      check_cuda_matches_cpu(
          [width](const std::vector<Tensor>& in) {
            auto [out, mean, rstd] = layer_norm_forward(in[0], {width}, in[1], in[2], 1e-5);
            return std::vector<Tensor>{out, mean, rstd};
          },
          {x, (pat({width}, 1.1) + 1.0).to(dt), pat({width}, 2.3).to(dt)});
    }
  }
}

TEST_CASE("special values: batch_norm with a NaN in one channel, training and eval") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    for (bool training : {true, false}) {
      INFO(label(dt, (training ? " training" : " eval")));
      // [2, 3, 4, 5]: a NaN in channel 1 (plane 1 of sample 0), an inf in channel 2 of sample 1.
      const Tensor x = with_specials({2, 3, 4, 5}, 0.4, {{20 + 7, kNan}, {60 + 40 + 3, kInf}}, dt, 3.0);
      check_cuda_matches_cpu(
          [training](const std::vector<Tensor>& in) {
            Tensor running_mean = in[3].detach().clone(), running_var = in[4].detach().clone();
            auto [out, save_mean, save_invstd] =
                batch_norm_forward(in[0], in[1], in[2], running_mean, running_var, training, 0.1, 1e-5);
            return std::vector<Tensor>{out, save_mean, save_invstd, running_mean, running_var};
          },
          {x, (pat({3}, 1.3) + 1.0).to(dt), pat({3}, 2.1).to(dt), pat({3}, 0.9).to(kFloat32),
           (pat({3}, 1.7).abs() + 0.5).to(kFloat32)});
    }
  }
}

TEST_CASE("special values: cross_entropy with NaN and infinite logits") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    for (Reduction reduction : {Reduction::None, Reduction::Mean}) {
      INFO(label(dt, " reduction ", static_cast<int>(reduction)));
      // Sample 0: a NaN logit; sample 2: +inf at its target (inf - inf: NaN); sample 3: -inf at
      // its target (loss +inf); sample 4: -inf elsewhere (a finite loss).
      const Tensor logits = with_specials(
          {5, 4}, 0.2, {{1, kNan}, {2 * 4 + 2, kInf}, {3 * 4 + 1, -kInf}, {4 * 4 + 0, -kInf}}, dt, 3.0);
      const Tensor target = test::make({3, 0, 2, 1, 2}, {5}, kInt64);
      check_cuda_matches_cpu(
          [reduction](const std::vector<Tensor>& in) {
            return cross_entropy(in[0], in[1], {}, -100, 0.0, reduction);
          },
          {logits, target});
    }
  }
}

TEST_CASE("special values: the fused attention with a NaN query and a NaN key") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (bool is_causal : {false, true}) {
      INFO(label(dt, (is_causal ? " causal" : "")));
      // q [1, 6, 4] with a NaN in row 1: that row's output and logsumexp are NaN, and so are the
      // gradients of the keys it sees. k [1, 7, 4] with a NaN in key 5: every row that sees key 5
      // is NaN (causal rows 0..4 do not see it). Gradients are compared without causality only:
      // with it, a masked pair's zero times the NaN query or key is NaN where a kernel multiplies
      // it in and nothing where it skips the pair, which depends on the kernel's tiles (the CPU
      // skips, the GPU's tiles multiply, as tiled attention kernels do). For the same reason v
      // holds no infinity here.
      const Tensor q = with_specials({1, 6, 4}, 0.1, {{5, kNan}}, dt, 1.5);
      const Tensor k = with_specials({1, 7, 4}, 0.2, {{5 * 4 + 2, kNan}}, dt, 1.5);
      const Tensor v = pat({1, 7, 3}, 0.3).to(dt);
      CudaCase c;
      c.backward = !is_causal;
      c.tol = dt == kFloat32   ? test::Tol{1e-5, 1e-5}
              : dt == kFloat16 ? test::Tol{2e-3, 1e-3}
                               : test::Tol{1.6e-2, 1e-2};
      check_cuda_matches_cpu(
          [is_causal](const std::vector<Tensor>& in) {
            auto [out, lse] = flash_attention_forward(in[0], in[1], in[2], Tensor(), 0.5, is_causal);
            return std::vector<Tensor>{out, lse};
          },
          {q, k, v}, c);
    }
  }
}

TEST_CASE("special values: conv2d with NaN and infinite inputs, through cuDNN and Loom's kernels") {
  LOOM_REQUIRE_GPU();
  for (bool with_cudnn : {true, false}) {
    test::CudnnEnabledGuard choice(with_cudnn);
    for (DType dt : cuda_float_dtypes()) {
      INFO(label(dt, (with_cudnn ? " cuDNN" : " Loom's kernels")));
      // x [2, 3, 6, 6]: a NaN in sample 0, an inf in sample 1; a NaN weight in output channel 3.
      const Tensor x = with_specials({2, 3, 6, 6}, 0.5, {{14, kNan}, {108 + 50, kInf}}, dt);
      const Tensor w = with_specials({4, 3, 3, 3}, 0.6, {{3 * 27 + 4, kNan}}, dt);
      const Tensor b = pat({4}, 0.7).to(dt);
      // The bfloat16 reference is the CPU's float32 convolution of the same values, rounded: oneDNN's
      // AMX bfloat16 convolution on the CPU also makes NaN of outputs whose window only borders
      // the NaN input (its tiles multiply the padding lanes by zero), which a direct convolution
      // does not do.
      auto conv = [dt](const std::vector<Tensor>& in) {
        if (dt != kBFloat16 || in[0].is_cuda()) return conv2d(in[0], in[1], in[2], {1, 1}, {1, 1});
        return conv2d(in[0].to(kFloat32), in[1].to(kFloat32), in[2].to(kFloat32), {1, 1}, {1, 1}).to(dt);
      };
      if (with_cudnn && !kEmulated) {
        // A real cuDNN may take a Winograd or FFT engine, whose transforms spread a NaN over a
        // whole tile: there the contract is that no NaN or infinity is lost.
        check_keeps_specials(conv({x.to(Device::cuda()), w.to(Device::cuda()), b.to(Device::cuda())}),
                             conv({x, w, b}), test::cuda_tol_for(dt), "cuDNN output");
        continue;
      }
      check_cuda_matches_cpu(conv, {x, w, b});
    }
  }
}

TEST_CASE("special values: average pooling, sums, means and variances over infinities") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    INFO(dt);
    // Plane 0 holds +inf and -inf in one window (NaN), plane 1 a NaN, plane 2 one +inf.
    const Tensor x =
        with_specials({1, 3, 4, 4}, 0.8, {{0, kInf}, {1, -kInf}, {16 + 5, kNan}, {32 + 10, kInf}}, dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return avg_pool2d(in[0], {2, 2}); }, {x});
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return adaptive_avg_pool2d(in[0], {1, 1});
        },
        {x});
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          Tensor planes = in[0].reshape({3, 16});
          return std::vector<Tensor>{sum(planes, {1}), mean(planes, {0}), var(planes, {1}),
                                     prod(planes, {1})};
        },
        {x});
  }
}

TEST_CASE("special values: fused_adam_ and fused_sgd_ carry a NaN or inf gradient into the parameter") {
  LOOM_REQUIRE_GPU();
  // One step over a parameter whose gradient holds a NaN and an inf: the same elements become
  // NaN (or inf) on both backends, and the others take the CPU's step.
  const Tensor p0 = pat({37}, 0.4),
               g0 = with_specials({37}, 0.5, {{3, kNan}, {20, kInf}, {21, -kInf}}, kFloat32);
  auto on = [](const Tensor& t, Device device) { return std::vector<Tensor>{t.to(device).clone()}; };
  for (bool decoupled : {false, true}) {
    INFO((decoupled ? "AdamW" : "Adam"));
    AdamStepOptions o;
    o.lr = 1e-2, o.weight_decay = 0.1, o.decoupled = decoupled;
    std::vector<Tensor> p[2], m[2], v[2];
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? Device(kCPU) : Device::cuda();
      p[d] = on(p0, device), m[d] = on(zeros({37}), device), v[d] = on(zeros({37}), device);
      fused_adam_(p[d], on(g0, device), m[d], v[d], std::vector<Tensor>{}, std::vector<int64_t>{1}, o);
    }
    test::check_same(p[1][0], p[0][0], test::cuda_tol_for(kFloat32), "param");
    test::check_same(m[1][0], m[0][0], test::cuda_tol_for(kFloat32), "exp_avg");
    test::check_same(v[1][0], v[0][0], test::cuda_tol_for(kFloat32), "exp_avg_sq");
  }
  SgdStepOptions o;
  o.lr = 0.1, o.momentum = 0.9, o.first_step = true;
  std::vector<Tensor> p[2], buf[2];
  for (int d = 0; d < 2; ++d) {
    const Device device = d == 0 ? Device(kCPU) : Device::cuda();
    p[d] = on(p0, device), buf[d] = on(zeros({37}), device);
    fused_sgd_(p[d], on(g0, device), buf[d], o);
  }
  test::check_same(p[1][0], p[0][0], test::cuda_tol_for(kFloat32), "SGD param");
  test::check_same(buf[1][0], buf[0][0], test::cuda_tol_for(kFloat32), "SGD momentum buffer");
}

}  // namespace
}  // namespace loom
