/*
 * CUDA shape ops against the CPU: cat, index_select, index_add, gather, scatter_add, tril/triu,
 * flip, pad and pad_backward, and the composites built on them (stack, embedding and its
 * backward), for every dtype the CPU kernels take (all of them: these ops move elements, and
 * the accumulating ones add in the dtype's own arithmetic), on contiguous, transposed,
 * step-sliced and expanded inputs, forward and backward. Repeated indices exercise the
 * accumulation of scatter_add/index_add, which must be deterministic: the CUDA kernels add in
 * the CPU's order, so even the 16-bit results match the CPU's bit for bit.
 */
#include <functional>
#include <string>
#include <vector>

#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::make;
using test::pat;

LOOM_CUDA_COVERS(Op::cat, Op::index_select, Op::index_add, Op::gather, Op::scatter_add, Op::tril, Op::triu,
                 Op::flip, Op::pad, Op::pad_backward);

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8,
                                       kUInt8,   kInt32,   kInt64,   kBool};

// Values of dtype dt: small integers (-2..2) for the integer types, so that sums stay exact.
Tensor values(IntArrayRef shape, DType dt, double seed) {
  if (dt == kBool) return gt(pat(shape, seed), 0.1);
  if (is_floating(dt)) return pat(shape, seed).to(dt);
  return pat(shape, seed, 2.9).to(dt);
}

Tensor index_of(const std::vector<double>& v, IntArrayRef shape) {
  return make(v, shape, kInt64);
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Forward, and for the floating inputs backward through autograd: out.backward(w) with a
// fixed upstream gradient w on both devices, then the inputs' gradients compared. The same
// check as the harness's backward, without its loss sum(out * w), so that the gradients of
// these ops are tested with the shape kernels alone (the formulas are written with them).
void check(const Fn& f, const std::vector<Tensor>& inputs, bool backward = true) {
  CudaCase c;
  c.backward = false;
  check_cuda_matches_cpu(f, inputs, c);
  if (!backward) return;
  std::vector<Tensor> cpu_in, gpu_in;
  bool any_grad = false;
  for (const Tensor& t : inputs) {
    cpu_in.push_back(t.detach().clone());
    gpu_in.push_back(t.detach().to(Device::cuda()));
    if (is_floating(t.dtype())) {
      cpu_in.back().requires_grad_();
      gpu_in.back().requires_grad_();
      any_grad = true;
    }
  }
  if (!any_grad) return;
  Tensor cpu_out = f(cpu_in), gpu_out = f(gpu_in);
  if (!cpu_out.requires_grad()) return;
  Tensor w = pat(cpu_out.sizes(), 0.37).to(cpu_out.dtype());
  cpu_out.backward(w);
  gpu_out.backward(w.to(Device::cuda()));
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    REQUIRE(cpu_in[i].grad().defined() == gpu_in[i].grad().defined());
    if (cpu_in[i].grad().defined())
      test::check_same(gpu_in[i].grad(), cpu_in[i].grad(), test::cuda_tol_for(cpu_in[i].dtype()),
                       "gradient of input " + std::to_string(i));
  }
}

TEST_CASE("shape: cat of three inputs along dim 0 and a middle dim, non-contiguous inputs") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    // dim 0: [2,3,4] + transposed [3,3,4] + [1,3,4]
    check(
        [](const std::vector<Tensor>& in) {
          return cat({in[0], in[1].permute({2, 1, 0}), in[2]}, 0);
        },
        {values({2, 3, 4}, dt, 0.1), values({4, 3, 3}, dt, 0.2), values({1, 3, 4}, dt, 0.3)});
    // dim 1: [2,3,4] + permuted [2,2,4] + expanded [2,1,4]->[2,3,4]
    check(
        [](const std::vector<Tensor>& in) {
          return cat({in[0], in[1].permute({1, 2, 0}), in[2].expand({2, 3, 4})}, 1);
        },
        {values({2, 3, 4}, dt, 0.4), values({4, 2, 2}, dt, 0.5), values({2, 1, 4}, dt, 0.6)});
    // last dim, step-sliced input
    check(
        [](const std::vector<Tensor>& in) {
          return cat({in[0].slice(1, 0, 6, 2), in[1], in[2]}, -1);
        },
        {values({3, 6}, dt, 0.7), values({3, 2}, dt, 0.8), values({3, 1}, dt, 0.9)});
  }
}

TEST_CASE("shape: stack (a composite of unsqueeze and cat) on CUDA") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    CAPTURE(dt);
    check(
        [](const std::vector<Tensor>& in) {
          return stack({in[0], in[1].t(), in[2]}, 1);
        },
        {values({3, 4}, dt, 0.1), values({4, 3}, dt, 0.2), values({3, 4}, dt, 0.3)});
  }
}

TEST_CASE("shape: index_select on dims 0 and 1 with repeated indices") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check([](const std::vector<Tensor>& in) { return index_select(in[0], 0, in[1]); },
          {values({5, 3}, dt, 0.1), index_of({4, 0, 2, 4, 4, 1}, {6})});
    check([](const std::vector<Tensor>& in) { return index_select(in[0].transpose(0, 1), 1, in[1]); },
          {values({5, 3, 2}, dt, 0.2), index_of({0, 3, 3, 1}, {4})});
    check([](const std::vector<Tensor>& in) { return index_select(in[0], 1, in[1].to(kInt32)); },
          {values({2, 4, 3}, dt, 0.3), index_of({2, 2, 0}, {3})});
  }
}

TEST_CASE("shape: index_add with repeated indices") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check([](const std::vector<Tensor>& in) { return index_add(in[0], 0, in[1], in[2]); },
          {values({5, 3}, dt, 0.1), index_of({0, 2, 2, 4, 0, 2}, {6}), values({6, 3}, dt, 0.2)});
    // dim 1, transposed src
    check([](const std::vector<Tensor>& in) { return index_add(in[0], 1, in[1], in[2].t()); },
          {values({3, 4}, dt, 0.3), index_of({1, 1, 3}, {3}), values({3, 3}, dt, 0.4)});
    // dim 1 of a 3-D tensor, expanded self
    check(
        [](const std::vector<Tensor>& in) {
          return index_add(in[0].expand({2, 4, 3}), 1, in[1], in[2]);
        },
        {values({1, 4, 3}, dt, 0.5), index_of({3, 0, 3, 3, 1}, {5}), values({2, 5, 3}, dt, 0.6)});
  }
}

TEST_CASE("shape: gather on dim 1 of a 2-D and dim 0 of a 3-D tensor, repeated indices") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check([](const std::vector<Tensor>& in) { return gather(in[0], 1, in[1]); },
          {values({3, 5}, dt, 0.1), index_of({0, 4, 4, 1, 2, 2, 2, 0, 3, 1, 1, 4}, {3, 4})});
    // dim 0 larger than the input's, other dims smaller; transposed input
    check(
        [](const std::vector<Tensor>& in) {
          return gather(in[0].permute({2, 1, 0}), 0, in[1]);
        },
        {values({2, 3, 4}, dt, 0.2),
         index_of({3, 0, 0, 1, 2, 2, 3, 3, 1, 0, 0, 0, 2, 1, 3, 3, 1, 1, 0, 2}, {5, 2, 2})});
  }
}

TEST_CASE("shape: scatter_add on dim 1 of a 2-D and dim 0 of a 3-D tensor, repeated indices") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    // src larger than index (only the covered part is added)
    check([](const std::vector<Tensor>& in) { return scatter_add(in[0], 1, in[1], in[2]); },
          {values({3, 4}, dt, 0.1), index_of({0, 3, 3, 1, 3, 2, 2, 2, 0, 1, 1, 1, 0, 0, 3}, {3, 5}),
           values({3, 6}, dt, 0.2)});
    // dim 0, index larger than self along dim 0, transposed src
    check(
        [](const std::vector<Tensor>& in) {
          return scatter_add(in[0], 0, in[1], in[2].permute({2, 1, 0}));
        },
        {values({3, 2, 4}, dt, 0.3),
         index_of({2, 0, 0, 1, 1, 1, 2, 2, 0, 2, 0, 1, 1, 2, 2, 0, 0, 0, 1, 1, 2, 2, 1, 0, 0, 1, 1, 2, 2, 0},
                  {5, 2, 3}),
         values({4, 2, 5}, dt, 0.4)});
  }
}

TEST_CASE("shape: scatter_add and index_add on CUDA are deterministic") {
  LOOM_REQUIRE_GPU();
  // Many additions to few places in float32, whose sum depends on the order.
  Tensor x = zeros({4, 8}).to(Device::cuda());
  Tensor src = test::pat({300, 8}, 0.3, 1e3).to(Device::cuda());
  std::vector<double> ix(300);
  for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<double>((i * 7) % 4);
  Tensor index = index_of(ix, {300}).to(Device::cuda());
  Tensor first = index_add(x, 0, index, src).to(kCPU);
  for (int run = 0; run < 3; ++run)
    CHECK(index_add(x, 0, index, src).to(kCPU).to_vector<float>() == first.to_vector<float>());
  CHECK(first.to_vector<float>() ==
        index_add(x.to(kCPU), 0, index.to(kCPU), src.to(kCPU)).to_vector<float>());

  Tensor sindex = index.view({300, 1}).expand({300, 8}).contiguous();
  Tensor s1 = scatter_add(x, 0, sindex, src).to(kCPU);
  CHECK(scatter_add(x, 0, sindex, src).to(kCPU).to_vector<float>() == s1.to_vector<float>());
  CHECK(s1.to_vector<float>() ==
        scatter_add(x.to(kCPU), 0, sindex.to(kCPU), src.to(kCPU)).to_vector<float>());
}

TEST_CASE("shape: tril and triu with diagonals -1, 0, 2 on a batched input") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    for (int64_t diagonal : {-1, 0, 2}) {
      CAPTURE(dt);
      CAPTURE(diagonal);
      check([diagonal](const std::vector<Tensor>& in) { return tril(in[0], diagonal); },
            {values({2, 4, 5}, dt, 0.1)});
      check([diagonal](const std::vector<Tensor>& in) { return triu(in[0], diagonal); },
            {values({2, 4, 5}, dt, 0.2)});
      // transposed batch, and a diagonal beyond the matrix (clamped)
      check(
          [diagonal](const std::vector<Tensor>& in) {
            return triu(in[0].permute({2, 1, 0}), diagonal);
          },
          {values({4, 3, 2}, dt, 0.3)});
    }
  }
  check([](const std::vector<Tensor>& in) { return tril(in[0], -100); }, {values({3, 4}, kFloat32, 0.4)});
  check([](const std::vector<Tensor>& in) { return triu(in[0], 100); }, {values({3, 4}, kFloat32, 0.5)});
}

TEST_CASE("shape: flip over several dims") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check([](const std::vector<Tensor>& in) { return flip(in[0], {0, 2}); }, {values({2, 3, 4}, dt, 0.1)});
    check([](const std::vector<Tensor>& in) { return flip(in[0].transpose(0, 2), {-1}); },
          {values({2, 3, 4}, dt, 0.2)});
    check(
        [](const std::vector<Tensor>& in) {
          return flip(in[0].slice(1, 0, 6, 2), {0, 1});
        },
        {values({3, 6}, dt, 0.3)});
  }
}

TEST_CASE("shape: pad, constant, reflect, replicate and circular, 3-D and 4-D, and pad_backward") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0], {1, 2}, "constant", 2.0);
        },
        {values({2, 3, 4}, dt, 0.1)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0].transpose(1, 3), {1, 0, 2, 1, 0, 1});
        },
        {values({2, 3, 2, 4}, dt, 0.2)});
    // negative pads crop
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0], {-1, 2, 1, -1}, "constant", -1.0);
        },
        {values({2, 3, 4}, dt, 0.3)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0], {2, 1}, "reflect");
        },
        {values({2, 3, 5}, dt, 0.4)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0].permute({0, 1, 3, 2}), {2, 3, 1, 2}, "reflect");
        },
        {values({1, 2, 5, 4}, dt, 0.5)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0], {2, -1, 1, 1}, "reflect");
        },
        {values({2, 3, 5}, dt, 0.6)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0].permute({0, 1, 3, 2}), {2, 3, 1, -1}, "replicate");
        },
        {values({1, 2, 5, 4}, dt, 0.65)});
    check(
        [](const std::vector<Tensor>& in) {
          return pad(in[0], {3, 1, -1, 2}, "circular");
        },
        {values({2, 3, 5}, dt, 0.68)});
  }
  // pad_backward called directly (reflect accumulates the mirrored elements), on a
  // non-contiguous grad_out; also through autograd above for the floating dtypes. It has no
  // derivative itself, so forward only here.
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check(
        [](const std::vector<Tensor>& in) {
          return pad_backward(in[0], {2, 3, 5}, {2, 1}, "reflect");
        },
        {values({2, 3, 8}, dt, 0.7)}, false);
    check(
        [](const std::vector<Tensor>& in) {
          return pad_backward(in[0].transpose(1, 2), {2, 3, 5}, {2, 1, 1, 1}, "replicate");
        },
        {values({2, 8, 5}, dt, 0.75)}, false);
    check(
        [](const std::vector<Tensor>& in) {
          return pad_backward(in[0], {2, 3, 5}, {4, -1}, "circular");
        },
        {values({2, 3, 8}, dt, 0.78)}, false);
    check(
        [](const std::vector<Tensor>& in) {
          return pad_backward(in[0].transpose(2, 3), {1, 2, 4, 5}, {2, 3, 1, 2}, "reflect");
        },
        {values({1, 2, 10, 7}, dt, 0.8)}, false);
    check(
        [](const std::vector<Tensor>& in) {
          return pad_backward(in[0], {2, 3, 4}, {-1, 2, 1, 0}, "constant");
        },
        {values({2, 4, 5}, dt, 0.9)}, false);
  }
}

TEST_CASE("shape: embedding forward and backward on CUDA") {
  LOOM_REQUIRE_GPU();
  for (DType dt : test::cuda_float_dtypes()) {
    CAPTURE(dt);
    const Tensor indices = index_of({1, 4, 1, 0, 5, 1}, {2, 3});
    check([](const std::vector<Tensor>& in) { return embedding(in[0], in[1]); },
          {values({6, 4}, dt, 0.1), indices});
    check([](const std::vector<Tensor>& in) { return embedding_backward(in[0], in[1], 6); },
          {values({2, 3, 4}, dt, 0.2), indices});
  }
}

TEST_CASE(
    "shape: bad indices on CUDA are reported at the next wait, naming the op, the position and the range") {
  LOOM_REQUIRE_GPU();
  const Tensor x = zeros({5, 3}).to(Device::cuda());
  const Tensor bad = index_of({1, 7, 0}, {3}).to(Device::cuda());
  const Tensor neg = index_of({0, -1, 2, 1, 0, 0}, {2, 3}).to(Device::cuda());
  // Each op checks its indices on the GPU without waiting; a bad one reads zero or adds nothing, so
  // only the adds' good indices leave a sum (index_add: rows 1 and 0 get 3 ones each; scatter_add:
  // 2 of row 0's ones and all 3 of row 1's).
  struct Case {
    std::function<Tensor()> op;
    std::string message;
    double sum;
  };
  const std::vector<Case> cases = {
      {[&] { return index_select(x, 0, bad); }, "index_select: an index out of range for dim 0 with size 5",
       0},
      {[&] {
         return index_add(x, 0, bad, ones({3, 3}).to(Device::cuda()));
       },
       "index_add: an index out of range for dim 0 with size 5", 6},
      {[&] { return gather(x, 1, neg); }, "gather: an index out of range for dim 1 with size 3", 0},
      {[&] {
         return scatter_add(x, 1, neg, ones({2, 3}).to(Device::cuda()));
       },
       "scatter_add: an index out of range for dim 1 with size 3", 5},
      {[&] { return embedding(x, bad); }, "index_select: an index out of range for dim 0 with size 5", 0}};
  for (const Case& c : cases) {
    CAPTURE(c.message);
    Tensor out;
    CHECK_NOTHROW(out = c.op());
    CHECK_THROWS_WITH_AS(cuda::synchronize(),
                         doctest::Contains((c.message + " (at index position 1)").c_str()), Error);
    CHECK(out.to(kCPU).sum().item<double>() == c.sum);  // reported once: readable now
  }
}

}  // namespace
}  // namespace loom
