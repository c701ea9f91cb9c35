/*
 * The CUDA op test table's tools: run a function on CPU tensors and on their CUDA copies,
 * forward and backward, and compare the results with per-dtype tolerances (PyTorch's
 * assert_close defaults unless a case widens them, saying why).
 *
 * Every file of tests/cuda/ops declares the ops its cases cover with LOOM_CUDA_COVERS; the
 * coverage test (coverage.cpp) fails while an op of ops/op_list.def that has a kernel has no
 * CUDA case or no CUDA kernel.
 */
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "ops/cuda/cudnn_conv.h"
#include "ops/dispatch.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"
#include "tests/test_util.h"

namespace loom::test {

inline std::set<Op>& cuda_covered_ops() {
  static std::set<Op> ops;
  return ops;
}
struct CudaCovers {
  CudaCovers(std::initializer_list<Op> ops) { cuda_covered_ops().insert(ops.begin(), ops.end()); }
};
#define LOOM_CUDA_COVERS_CAT2(a, b) a##b
#define LOOM_CUDA_COVERS_CAT(a, b) LOOM_CUDA_COVERS_CAT2(a, b)
#define LOOM_CUDA_COVERS(...) \
  static const ::loom::test::CudaCovers LOOM_CUDA_COVERS_CAT(loom_cuda_covers_, __LINE__) { __VA_ARGS__ }

// "a b c" for the failure context (doctest's INFO takes one expression).
template <class... Args>
std::string label(const Args&... args) {
  std::ostringstream os;
  ((os << args << ' '), ...);
  return os.str();
}

// cuDNN on or off for a scope, and back on at its end, also when a REQUIRE throws.
struct CudnnEnabledGuard {
  explicit CudnnEnabledGuard(bool on) { cuda::set_cudnn_enabled(on); }
  ~CudnnEnabledGuard() { cuda::set_cudnn_enabled(true); }
  CudnnEnabledGuard(const CudnnEnabledGuard&) = delete;
  CudnnEnabledGuard& operator=(const CudnnEnabledGuard&) = delete;
};

struct CudaCase {
  bool backward = true;     // also compare the gradients of the floating inputs
  std::optional<Tol> tol{};  // default: tol_for(output dtype), widened for f32 sums (below)
  std::optional<Tol> grad_tol{};
};

// Tolerance for comparing a CUDA result with the CPU's. Float32 results of reductions and
// matmuls are summed in a different order on the two backends, so PyTorch's own CUDA-vs-CPU
// tests (test_ops.py) widen f32 to about 1e-5 relative; we do the same for every op.
inline Tol cuda_tol_for(DType t) {
  if (t == kFloat32) return {1e-5, 1e-5};
  return tol_for(t);
}

inline void check_same(const Tensor& gpu, const Tensor& cpu, Tol tol, const std::string& what) {
  INFO(what);
  REQUIRE(gpu.defined() == cpu.defined());
  if (!gpu.defined()) return;
  CHECK(gpu.is_cuda());
  CHECK(gpu.dtype() == cpu.dtype());
  REQUIRE(gpu.sizes().vec() == cpu.sizes().vec());
  const std::string bad = mismatch(gpu.to(kCPU).to_vector<double>(), cpu.to_vector<double>(), tol);
  CHECK_MESSAGE(bad.empty(), what, ": ", bad);
}

// Runs f on `inputs` (CPU tensors) and on their copies on the GPU, and compares every output;
// with c.backward, also the gradients of the floating inputs for loss = sum(out_k * w_k) with
// fixed random weights w_k.
inline void check_cuda_matches_cpu(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& f,
                                   const std::vector<Tensor>& inputs, CudaCase c = {}) {
  std::vector<Tensor> cpu_in, gpu_in;
  for (const Tensor& t : inputs) {
    cpu_in.push_back(t.defined() ? t.detach().clone() : Tensor());
    gpu_in.push_back(t.defined() ? t.detach().to(Device::cuda()) : Tensor());
  }
  bool any_grad = false;
  if (c.backward) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i].defined() && is_floating(inputs[i].dtype())) {
        cpu_in[i].requires_grad_();
        gpu_in[i].requires_grad_();
        any_grad = true;
      }
    }
  }
  std::vector<Tensor> cpu_out = f(cpu_in), gpu_out = f(gpu_in);
  REQUIRE(cpu_out.size() == gpu_out.size());
  for (size_t k = 0; k < cpu_out.size(); ++k)
    check_same(gpu_out[k], cpu_out[k], c.tol.value_or(cuda_tol_for(cpu_out[k].dtype())), "output " + std::to_string(k));
  if (!any_grad) return;
  Tensor cpu_loss, gpu_loss;
  for (size_t k = 0; k < cpu_out.size(); ++k) {
    if (!cpu_out[k].defined() || !is_floating(cpu_out[k].dtype()) || !cpu_out[k].requires_grad()) continue;
    Tensor w = pat(cpu_out[k].sizes(), 0.37 + static_cast<double>(k)).to(cpu_out[k].dtype());
    Tensor cl = (cpu_out[k] * w).sum().to(kFloat64), gl = (gpu_out[k] * w.to(Device::cuda())).sum().to(kFloat64);
    cpu_loss = cpu_loss.defined() ? cpu_loss + cl : cl;
    gpu_loss = gpu_loss.defined() ? gpu_loss + gl : gl;
  }
  if (!cpu_loss.defined()) return;
  cpu_loss.backward();
  gpu_loss.backward();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!cpu_in[i].defined() || !cpu_in[i].requires_grad()) continue;
    REQUIRE(cpu_in[i].grad().defined() == gpu_in[i].grad().defined());
    if (cpu_in[i].grad().defined())
      check_same(gpu_in[i].grad(), cpu_in[i].grad(), c.grad_tol.value_or(c.tol.value_or(cuda_tol_for(cpu_in[i].dtype()))),
                 "gradient of input " + std::to_string(i));
  }
}

// The same for a function of one output.
inline void check_cuda_matches_cpu(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   const std::vector<Tensor>& inputs, CudaCase c = {}) {
  check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{f(in)}; }, inputs, c);
}

// Int64 indices (i * 5 + 1) % high of `shape`, on the CPU.
inline Tensor index_values(IntArrayRef shape, int64_t high) {
  std::vector<double> v;
  for (int64_t i = 0; i < shape_numel(shape); ++i) v.push_back(static_cast<double>((i * 5 + 1) % high));
  return make(v, shape, kInt64);
}

// One output as the list a case function returns.
inline std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

// The floating dtypes every kernel supports.
inline const std::vector<DType>& cuda_float_dtypes() {
  static const std::vector<DType> dtypes{kFloat32, kFloat64, kFloat16, kBFloat16};
  return dtypes;
}

}  // namespace loom::test
