/*
 * The emulated cuDNN (core/cuda/emulated/cudnn_graph.h): the reference convolution (forward,
 * backward data, backward filter) against a float64 host reference with stride, padding,
 * dilation and groups; NHWC operands give the NCHW results; beta adds the prior output;
 * CUDNN_CONVOLUTION flips the filter; 16-bit operands are summed in float and rounded once. The
 * reference batch norm (training with running statistics, inference, backward) through Loom's
 * wrapper (ops/cuda/cudnn_batch_norm.h) against a float64 reference, and what its engine and the
 * wrapper refuse. And each rejection the cuDNN documentation lists for what Loom could get wrong,
 * with cuDNN's status.
 * Emulated build only: these pin the emulation's contract (a GPU runs the op tests).
 */
#include <doctest/doctest.h>

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#endif
#if defined(LOOM_CUDA_EMULATED)
#include <array>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ops/cuda/cudnn_batch_norm.h"
#include "ops/ops.h"
#include "tests/gpu_test.h"

using namespace loom;

namespace {

using Dims = std::array<int64_t, 4>;

enum class Kind { kForward, kBackwardData, kBackwardFilter };

struct Problem {
  int64_t n = 2, c = 4, h = 7, w = 6, k = 4, r = 3, s = 2;
  int64_t stride[2] = {2, 1}, pad[2] = {1, 0}, dil[2] = {2, 1};
  int64_t groups = 2;
  int64_t p() const { return (h + 2 * pad[0] - dil[0] * (r - 1) - 1) / stride[0] + 1; }
  int64_t q() const { return (w + 2 * pad[1] - dil[1] * (s - 1) - 1) / stride[1] + 1; }
  Dims x_dims() const { return {n, c, h, w}; }
  Dims w_dims() const { return {k, c / groups, r, s}; }
  Dims y_dims() const { return {n, k, p(), q()}; }
};

Dims nchw(const Dims& d) {
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}
Dims nhwc(const Dims& d) {
  return {d[1] * d[2] * d[3], 1, d[3] * d[1], d[1]};
}

std::vector<double> values(const Dims& d, double seed) {
  std::vector<double> v(static_cast<size_t>(d[0] * d[1] * d[2] * d[3]));
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(seed + 0.37 * static_cast<double>(i));
  return v;
}

int64_t at(const Dims& d, int64_t a, int64_t b, int64_t c, int64_t e) {
  return ((a * d[1] + b) * d[2] + c) * d[3] + e;
}

// The float64 reference of the three convolutions (cross-correlation), NCHW order; `out` of the
// kind's output shape.
std::vector<double> reference(Kind kind, const Problem& pr, const std::vector<double>& x,
                              const std::vector<double>& w, const std::vector<double>& y) {
  const Dims xd = pr.x_dims(), wd = pr.w_dims(), yd = pr.y_dims();
  const int64_t cg = pr.c / pr.groups, kg = pr.k / pr.groups;
  std::vector<double> out(kind == Kind::kForward        ? y.size()
                          : kind == Kind::kBackwardData ? x.size()
                                                        : w.size(),
                          0.0);
  for (int64_t n = 0; n < pr.n; ++n)
    for (int64_t k = 0; k < pr.k; ++k)
      for (int64_t oh = 0; oh < yd[2]; ++oh)
        for (int64_t ow = 0; ow < yd[3]; ++ow)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < pr.r; ++r)
              for (int64_t s = 0; s < pr.s; ++s) {
                const int64_t ih = oh * pr.stride[0] - pr.pad[0] + r * pr.dil[0];
                const int64_t iw = ow * pr.stride[1] - pr.pad[1] + s * pr.dil[1];
                if (ih < 0 || ih >= pr.h || iw < 0 || iw >= pr.w) continue;
                const int64_t xi = at(xd, n, k / kg * cg + c, ih, iw), wi = at(wd, k, c, r, s),
                              yi = at(yd, n, k, oh, ow);
                if (kind == Kind::kForward)
                  out[static_cast<size_t>(yi)] += x[static_cast<size_t>(xi)] * w[static_cast<size_t>(wi)];
                if (kind == Kind::kBackwardData)
                  out[static_cast<size_t>(xi)] += y[static_cast<size_t>(yi)] * w[static_cast<size_t>(wi)];
                if (kind == Kind::kBackwardFilter)
                  out[static_cast<size_t>(wi)] += y[static_cast<size_t>(yi)] * x[static_cast<size_t>(xi)];
              }
  return out;
}

// A device tensor holding `v` (NCHW order) with the given memory layout.
Tensor device_tensor(const std::vector<double>& v, const Dims& d, bool channels_last, DType dt) {
  Tensor t = tensor(v, {d[0], d[1], d[2], d[3]}).to(dt);
  if (!channels_last) return t.to(Device::cuda());
  // The NHWC bytes go to the device as one contiguous block, viewed there as NCHW.
  return contiguous(t.permute({0, 2, 3, 1})).to(Device::cuda()).permute({0, 3, 1, 2});
}

// Destroys the descriptors of a test at its end.
struct Owned {
  std::vector<cudnnBackendDescriptor_t> all;
  ~Owned() {
    for (auto d : all) cudnnBackendDestroyDescriptor(d);
  }
  cudnnBackendDescriptor_t make(cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = nullptr;
    REQUIRE(cudnnBackendCreateDescriptor(type, &d) == CUDNN_STATUS_SUCCESS);
    all.push_back(d);
    return d;
  }
};

cudnnStatus_t set_i64s(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name, const int64_t* v,
                       int64_t n) {
  return cudnnBackendSetAttribute(d, name, CUDNN_TYPE_INT64, n, v);
}

cudnnBackendDescriptor_t tensor_desc(Owned& o, const Dims& dims, const Dims& strides, int64_t uid,
                                     cudnnDataType_t type = CUDNN_DATA_FLOAT, bool finalize = true) {
  cudnnBackendDescriptor_t t = o.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t align = 4;
  REQUIRE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dims.data(), 4) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(t, CUDNN_ATTR_TENSOR_STRIDES, strides.data(), 4) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, &uid, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &align, 1) == CUDNN_STATUS_SUCCESS);
  if (finalize) REQUIRE(cudnnBackendFinalize(t) == CUDNN_STATUS_SUCCESS);
  return t;
}

cudnnBackendDescriptor_t conv_desc(Owned& o, const Problem& pr, cudnnDataType_t compute = CUDNN_DATA_FLOAT,
                                   cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION) {
  cudnnBackendDescriptor_t c = o.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t two = 2;
  REQUIRE(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(c, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1,
                                   &mode) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(c, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &two, 1) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(c, CUDNN_ATTR_CONVOLUTION_DILATIONS, pr.dil, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(c, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, pr.stride, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(c, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, pr.pad, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(set_i64s(c, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, pr.pad, 2) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendFinalize(c) == CUDNN_STATUS_SUCCESS);
  return c;
}

struct OpAttrs {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
};

OpAttrs op_attrs(Kind kind) {
  if (kind == Kind::kForward)
    return {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
            CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
  if (kind == Kind::kBackwardData)
    return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
            CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
  return {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
          CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
}

// An operation of `kind` over (conv, x, w, y), not finalized.
cudnnBackendDescriptor_t op_desc(Owned& o, Kind kind, cudnnBackendDescriptor_t conv,
                                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t w,
                                 cudnnBackendDescriptor_t y, float beta = 0.0f) {
  const OpAttrs a = op_attrs(kind);
  cudnnBackendDescriptor_t op = o.make(a.type);
  const float alpha = 1.0f;
  REQUIRE(cudnnBackendSetAttribute(op, a.alpha, CUDNN_TYPE_FLOAT, 1, &alpha) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(op, a.beta, CUDNN_TYPE_FLOAT, 1, &beta) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(op, a.conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(op, a.x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(op, a.w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(op, a.y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y) == CUDNN_STATUS_SUCCESS);
  return op;
}

cudnnBackendDescriptor_t graph_of(Owned& o, cudnnHandle_t handle, cudnnBackendDescriptor_t op) {
  cudnnBackendDescriptor_t g = o.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  REQUIRE(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendFinalize(g) == CUDNN_STATUS_SUCCESS);
  return g;
}

// The heuristic's configurations for `graph` (count in `found`); the first in `config`.
void heuristic(Owned& o, cudnnBackendDescriptor_t graph, int64_t& found, cudnnBackendDescriptor_t& config) {
  cudnnBackendDescriptor_t h = o.make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  REQUIRE(cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &graph) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(h, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendFinalize(h) == CUDNN_STATUS_SUCCESS);
  config = o.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  REQUIRE(cudnnBackendGetAttribute(h, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &found,
                                   &config) == CUDNN_STATUS_SUCCESS);
}

// The plan of the heuristic's first configuration and its workspace size.
cudnnBackendDescriptor_t plan_of(Owned& o, cudnnHandle_t handle, cudnnBackendDescriptor_t graph,
                                 int64_t& workspace) {
  int64_t found = 0;
  cudnnBackendDescriptor_t config = nullptr;
  heuristic(o, graph, found, config);
  REQUIRE(found >= 1);
  cudnnBackendDescriptor_t plan = o.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  REQUIRE(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &config) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS);
  int64_t n = 0;
  REQUIRE(cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &workspace) == CUDNN_STATUS_SUCCESS);
  return plan;
}

cudnnBackendDescriptor_t pack_of(Owned& o, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs,
                                 void* ws) {
  cudnnBackendDescriptor_t p = o.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  REQUIRE(cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                   static_cast<int64_t>(uids.size()), uids.data()) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                                   static_cast<int64_t>(ptrs.size()), ptrs.data()) == CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(p, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendFinalize(p) == CUDNN_STATUS_SUCCESS);
  return p;
}

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
};

// Runs one convolution of `kind` through the whole backend API, with the operands in NCHW or
// NHWC memory and the output first holding `prior` (used when beta is 1); returns the output
// in NCHW order as doubles.
std::vector<double> run(Kind kind, const Problem& pr, bool channels_last, DType dt = kFloat32,
                        float beta = 0.0f, cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION) {
  const cudnnDataType_t type = dt == kFloat32   ? CUDNN_DATA_FLOAT
                               : dt == kFloat16 ? CUDNN_DATA_HALF
                                                : CUDNN_DATA_BFLOAT16;
  Handle handle;
  Owned o;
  const Dims xd = pr.x_dims(), wd = pr.w_dims(), yd = pr.y_dims();
  auto strides = [&](const Dims& d) { return channels_last ? nhwc(d) : nchw(d); };
  Tensor x = device_tensor(values(xd, 0.1), xd, channels_last, dt);
  Tensor w = device_tensor(values(wd, 1.3), wd, channels_last, dt);
  Tensor y = device_tensor(values(yd, 2.7), yd, channels_last, dt);
  cudnnBackendDescriptor_t tx = tensor_desc(o, xd, strides(xd), 1, type),
                           tw = tensor_desc(o, wd, strides(wd), 2, type),
                           ty = tensor_desc(o, yd, strides(yd), 3, type);
  cudnnBackendDescriptor_t op = op_desc(o, kind, conv_desc(o, pr, CUDNN_DATA_FLOAT, mode), tx, tw, ty, beta);
  REQUIRE(cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS);
  int64_t ws_bytes = 0;
  cudnnBackendDescriptor_t plan = plan_of(o, handle.h, graph_of(o, handle.h, op), ws_bytes);
  Tensor ws = empty({ws_bytes}, TensorOptions(kUInt8).device(Device::cuda()));
  cudnnBackendDescriptor_t pack =
      pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()}, ws.data_ptr());
  REQUIRE(cudnnBackendExecute(handle.h, plan, pack) == CUDNN_STATUS_SUCCESS);
  const Tensor& out = kind == Kind::kForward ? y : kind == Kind::kBackwardData ? x : w;
  return out.to_vector<double>();
}

void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i])));
  }
}

// ---- batch norm ---------------------------------------------------------------------------------

// The float64 batch norm of x [N, C, H, W] (NCHW order) per channel c: mean, biased variance,
// y = w * (x - mean) / sqrt(var + eps) + b, and the backward for dy.
struct BatchNormReference {
  std::vector<double> mean, var, invstd, y, dx, dw, db;
  BatchNormReference(const Dims& d, const std::vector<double>& x, const std::vector<double>& w,
                     const std::vector<double>& b, const std::vector<double>& dy, double eps) {
    const int64_t m = d[0] * d[2] * d[3];
    const auto c_count = static_cast<size_t>(d[1]);
    mean.assign(c_count, 0);
    var.assign(c_count, 0);
    invstd.assign(c_count, 0);
    dw.assign(c_count, 0);
    db.assign(c_count, 0);
    y.assign(x.size(), 0);
    dx.assign(x.size(), 0);
    auto each = [&](int64_t c, auto&& body) {
      for (int64_t n = 0; n < d[0]; ++n)
        for (int64_t h = 0; h < d[2]; ++h)
          for (int64_t e = 0; e < d[3]; ++e) body(static_cast<size_t>(at(d, n, c, h, e)));
    };
    for (int64_t c = 0; c < d[1]; ++c) {
      const auto k = static_cast<size_t>(c);
      each(c, [&](size_t i) { mean[k] += x[i] / static_cast<double>(m); });
      each(c, [&](size_t i) { var[k] += (x[i] - mean[k]) * (x[i] - mean[k]) / static_cast<double>(m); });
      invstd[k] = 1.0 / std::sqrt(var[k] + eps);
      each(c, [&](size_t i) {
        const double xhat = (x[i] - mean[k]) * invstd[k];
        y[i] = w[k] * xhat + b[k];
        db[k] += dy[i];
        dw[k] += dy[i] * xhat;
      });
      each(c, [&](size_t i) {
        const double xhat = (x[i] - mean[k]) * invstd[k];
        dx[i] = w[k] * invstd[k] *
                (dy[i] - db[k] / static_cast<double>(m) - xhat * dw[k] / static_cast<double>(m));
      });
    }
  }
};

Tensor device_floats(const std::vector<double>& v) {
  return tensor(v, {static_cast<int64_t>(v.size())}).to(kFloat32).to(Device::cuda());
}

// The reference engine's error bound after the one rounding to the activations' type.
double rounding_of(DType dt) {
  return dt == kFloat32 ? 1e-5 : dt == kFloat16 ? 2e-3 : 1e-2;
}

}  // namespace

TEST_CASE("emulated cuDNN: batch norm training, running statistics, inference and backward match float64") {
  LOOM_REQUIRE_GPU();
  const Dims d{2, 3, 4, 5};
  const double eps = 1e-3, momentum = 0.25;
  const std::vector<double> w{1.5, -0.5, 2.0}, b{0.25, 0.0, -1.0}, run_mean{0.1, -0.2, 0.3},
      run_var{1.0, 2.0, 0.5};
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    // x and dy as the device holds them (rounded to dt), so that the reference sees the same inputs.
    const std::vector<double> x = tensor(values(d, 0.3), {d[0], d[1], d[2], d[3]}).to(dt).to_vector<double>();
    const std::vector<double> dy =
        tensor(values(d, 1.9), {d[0], d[1], d[2], d[3]}).to(dt).to_vector<double>();
    const BatchNormReference want(d, x, w, b, dy, eps);
    Tensor xd = device_tensor(x, d, true, dt), out = device_tensor(values(d, 5.0), d, true, dt);
    Tensor save_mean = device_floats({0, 0, 0}), save_invstd = device_floats({0, 0, 0});
    Tensor rm = device_floats(run_mean), rv = device_floats(run_var);
    REQUIRE(cuda::cudnn_batch_norm(out, save_mean, save_invstd, xd, device_floats(w), device_floats(b), rm,
                                   rv, true, momentum, eps));
    check_close(contiguous(out).to_vector<double>(), want.y, rounding_of(dt));
    check_close(save_mean.to_vector<double>(), want.mean, 1e-6);
    check_close(save_invstd.to_vector<double>(), want.invstd, 1e-6);
    const double m = static_cast<double>(d[0] * d[2] * d[3]);
    std::vector<double> next_mean, next_var;
    for (size_t c = 0; c < 3; ++c) {
      next_mean.push_back((1 - momentum) * run_mean[c] + momentum * want.mean[c]);
      next_var.push_back((1 - momentum) * run_var[c] + momentum * want.var[c] * m / (m - 1));  // unbiased
    }
    check_close(rm.to_vector<double>(), next_mean, 1e-6);
    check_close(rv.to_vector<double>(), next_var, 1e-6);

    // Inference reads the statistics it is given; undefined weight and bias are ones and zeros.
    Tensor eval_out = device_tensor(values(d, 5.0), d, true, dt);
    REQUIRE(cuda::cudnn_batch_norm(eval_out, device_floats(run_mean), device_floats({2.0, 1.0, 0.5}), xd,
                                   Tensor(), Tensor(), Tensor(), Tensor(), false, momentum, eps));
    std::vector<double> want_eval(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const size_t c = static_cast<size_t>(static_cast<int64_t>(i) / (d[2] * d[3]) % d[1]);
      want_eval[i] = (x[i] - run_mean[c]) * std::vector<double>{2.0, 1.0, 0.5}[c];
    }
    check_close(contiguous(eval_out).to_vector<double>(), want_eval, rounding_of(dt));

    Tensor dyd = device_tensor(dy, d, true, dt), dx = device_tensor(values(d, 5.0), d, true, dt);
    Tensor dw = device_floats({0, 0, 0}), db = device_floats({0, 0, 0});
    REQUIRE(cuda::cudnn_batch_norm_backward(dx, dw, db, dyd, xd, device_floats(w), save_mean, save_invstd));
    check_close(contiguous(dx).to_vector<double>(), want.dx, rounding_of(dt));
    check_close(dw.to_vector<double>(), want.dw, 1e-5);
    check_close(db.to_vector<double>(), want.db, 1e-5);
  }
}

TEST_CASE("emulated cuDNN: what the batch norm engine and Loom's wrapper refuse") {
  LOOM_REQUIRE_GPU();
  const Dims d{2, 3, 4, 5};
  const std::vector<double> x = values(d, 0.3);
  Tensor save_mean = device_floats({0, 0, 0}), save_invstd = device_floats({0, 0, 0});
  SUBCASE("the wrapper falls back, writing nothing, for what no engine runs") {
    Tensor out = device_tensor(values(d, 5.0), d, true, kFloat32);
    const std::vector<double> before = contiguous(out).to_vector<double>();
    auto refused = [&](const Tensor& xd, const Tensor& rm, const Tensor& rv, const Tensor& o) {
      return !cuda::cudnn_batch_norm(o, save_mean, save_invstd, xd, Tensor(), Tensor(), rm, rv, true, 0.1,
                                     1e-5);
    };
    const Tensor nhwc = device_tensor(x, d, true, kFloat32);
    CHECK(refused(device_tensor(x, d, false, kFloat32), Tensor(), Tensor(), out));  // NCHW activations
    CHECK(refused(device_tensor(x, d, true, kFloat64), Tensor(), Tensor(),
                  device_tensor(values(d, 5.0), d, true, kFloat64)));  // float64
    CHECK(refused(nhwc, device_floats({0, 0, 0}).to(kFloat64), device_floats({1, 1, 1}).to(kFloat64), out));
    CHECK(refused(nhwc, device_floats({0, 0, 0, 0, 0, 0}).slice(0, 0, 6, 2), device_floats({1, 1, 1}), out));
    CHECK(contiguous(out).to_vector<double>() == before);
    CHECK(save_mean.to_vector<double>() == std::vector<double>{0, 0, 0});
  }
  SUBCASE("descriptor rules and engine limits, with cuDNN's status") {
    Handle handle;
    Owned o;
    const Dims cd{1, 3, 1, 1}, cs{3, 1, 3, 3}, one{1, 1, 1, 1};
    auto scalar = [&](int64_t uid) {
      cudnnBackendDescriptor_t t = tensor_desc(o, one, one, uid, CUDNN_DATA_FLOAT, false);
      const bool yes = true;
      REQUIRE(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes) ==
              CUDNN_STATUS_SUCCESS);
      REQUIRE(cudnnBackendFinalize(t) == CUDNN_STATUS_SUCCESS);
      return t;
    };
    // A training batch norm of x in `strides` order, of `mode`, with scale of `scale_dims`.
    auto forward = [&](const Dims& strides, cudnnBackendNormMode_t mode, const Dims& scale_dims,
                       bool with_bias) {
      cudnnBackendDescriptor_t op = o.make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR);
      const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
      REQUIRE(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE, CUDNN_TYPE_NORM_MODE, 1,
                                       &mode) == CUDNN_STATUS_SUCCESS);
      REQUIRE(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1,
                                       &phase) == CUDNN_STATUS_SUCCESS);
      const std::vector<std::pair<cudnnBackendAttributeName_t, cudnnBackendDescriptor_t>> tensors = {
          {CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, tensor_desc(o, d, strides, 1)},
          {CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, tensor_desc(o, d, strides, 2)},
          {CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, tensor_desc(o, scale_dims, cs, 3)},
          {CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, tensor_desc(o, cd, cs, 5)},
          {CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, tensor_desc(o, cd, cs, 6)},
          {CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, scalar(7)}};
      for (const auto& [name, t] : tensors)
        REQUIRE(cudnnBackendSetAttribute(op, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t) ==
                CUDNN_STATUS_SUCCESS);
      if (with_bias) {
        cudnnBackendDescriptor_t bias = tensor_desc(o, cd, cs, 4);
        REQUIRE(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bias) == CUDNN_STATUS_SUCCESS);
      }
      return op;
    };
    auto configurations = [&](cudnnBackendDescriptor_t op) {
      REQUIRE(cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS);
      int64_t found = -1;
      cudnnBackendDescriptor_t config = nullptr;
      heuristic(o, graph_of(o, handle.h, op), found, config);
      return found;
    };
    CHECK(configurations(forward(nhwc(d), CUDNN_BATCH_NORM, cd, true)) == 1);
    CHECK(configurations(forward(nchw(d), CUDNN_BATCH_NORM, cd, true)) == 0);  // NHWC activations only
    CHECK(cudnnBackendFinalize(forward(nhwc(d), CUDNN_BATCH_NORM, cd, false)) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBackendFinalize(forward(nhwc(d), CUDNN_BATCH_NORM, {1, 4, 1, 1}, true)) ==
          CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
    CHECK(configurations(forward(nhwc(d), CUDNN_LAYER_NORM, cd, true)) == 0);
    char message[256] = {};
    cudnnGetLastErrorString(message, sizeof(message));
    CHECK(std::string(message).find("CUDNN_BATCH_NORM") != std::string::npos);
    // Running statistics come as the factor and all four tensors, in training only.
    cudnnBackendDescriptor_t partial = forward(nhwc(d), CUDNN_BATCH_NORM, cd, true);
    cudnnBackendDescriptor_t factor = scalar(8);
    REQUIRE(cudnnBackendSetAttribute(partial, CUDNN_ATTR_OPERATION_NORM_FWD_EXP_AVG_FACTOR_DESC,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &factor) == CUDNN_STATUS_SUCCESS);
    CHECK(cudnnBackendFinalize(partial) == CUDNN_STATUS_BAD_PARAM);
    cudnnBackendDescriptor_t peers = forward(nhwc(d), CUDNN_BATCH_NORM, cd, true);
    cudnnBackendDescriptor_t stats = tensor_desc(o, cd, cs, 9);
    CHECK(cudnnBackendSetAttribute(peers, CUDNN_ATTR_OPERATION_NORM_FWD_PEER_STAT_DESCS,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &stats) == CUDNN_STATUS_NOT_SUPPORTED);
  }
}

TEST_CASE("emulated cuDNN: forward, backward data and backward filter match a float64 reference") {
  LOOM_REQUIRE_GPU();
  Problem pr;  // stride (2, 1), padding (1, 0), dilation (2, 1), groups 2
  Problem depthwise;
  depthwise.c = depthwise.k = depthwise.groups = 3;
  depthwise.stride[1] = 2;
  depthwise.pad[1] = 1;
  for (const Problem& p : {pr, depthwise})
    for (Kind kind : {Kind::kForward, Kind::kBackwardData, Kind::kBackwardFilter}) {
      CAPTURE(static_cast<int>(kind));
      CAPTURE(p.groups);
      const auto want =
          reference(kind, p, values(p.x_dims(), 0.1), values(p.w_dims(), 1.3), values(p.y_dims(), 2.7));
      check_close(run(kind, p, false), want, 1e-5);
    }
}

TEST_CASE("emulated cuDNN: NHWC operands give the NCHW results, bit for bit") {
  LOOM_REQUIRE_GPU();
  Problem pr;
  for (Kind kind : {Kind::kForward, Kind::kBackwardData, Kind::kBackwardFilter}) {
    CAPTURE(static_cast<int>(kind));
    CHECK(run(kind, pr, true) == run(kind, pr, false));
  }
}

TEST_CASE(
    "emulated cuDNN: beta = 1 adds the prior output, 16-bit types are summed in float and rounded once") {
  LOOM_REQUIRE_GPU();
  Problem pr;
  const auto x = values(pr.x_dims(), 0.1), w = values(pr.w_dims(), 1.3), y = values(pr.y_dims(), 2.7);
  auto want = reference(Kind::kForward, pr, x, w, y);
  for (size_t i = 0; i < want.size(); ++i) want[i] += static_cast<float>(y[i]);
  check_close(run(Kind::kForward, pr, false, kFloat32, 1.0f), want, 1e-5);
  for (DType dt : {kFloat16, kBFloat16}) {
    CAPTURE(dt);
    // The reference from the 16-bit inputs, rounded once to the 16-bit type.
    auto round16 = [&](const std::vector<double>& v) {
      return tensor(v, {static_cast<int64_t>(v.size())}).to(dt).to_vector<double>();
    };
    const auto want16 = round16(reference(Kind::kForward, pr, round16(x), round16(w), y));
    check_close(run(Kind::kForward, pr, true, dt), want16, dt == kFloat16 ? 1e-3 : 8e-3);
  }
}

TEST_CASE("emulated cuDNN: CUDNN_CONVOLUTION flips the filter") {
  LOOM_REQUIRE_GPU();
  Problem pr;
  pr.groups = 1;
  auto w = values(pr.w_dims(), 1.3);
  std::vector<double> flipped(w.size());
  const Dims wd = pr.w_dims();
  for (int64_t k = 0; k < wd[0]; ++k)
    for (int64_t c = 0; c < wd[1]; ++c)
      for (int64_t r = 0; r < pr.r; ++r)
        for (int64_t s = 0; s < pr.s; ++s)
          flipped[static_cast<size_t>(at(wd, k, c, r, s))] =
              w[static_cast<size_t>(at(wd, k, c, pr.r - 1 - r, pr.s - 1 - s))];
  const auto want =
      reference(Kind::kForward, pr, values(pr.x_dims(), 0.1), flipped, values(pr.y_dims(), 2.7));
  check_close(run(Kind::kForward, pr, false, kFloat32, 0.0f, CUDNN_CONVOLUTION), want, 1e-5);
}

TEST_CASE("emulated cuDNN: descriptor rules, with cuDNN's status") {
  LOOM_REQUIRE_GPU();
  Handle handle;
  Owned o;
  Problem pr;
  const Dims xd = pr.x_dims(), wd = pr.w_dims(), yd = pr.y_dims();
  SUBCASE("an attribute of the wrong type, a finalized descriptor changed, a descriptor not finalized") {
    cudnnBackendDescriptor_t t = o.make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int32_t dims32[4] = {1, 1, 1, 1};
    CHECK(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT32, 4, dims32) ==
          CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
    const int64_t zero_dim[4] = {1, 0, 1, 1};
    CHECK(set_i64s(t, CUDNN_ATTR_TENSOR_DIMENSIONS, zero_dim, 4) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBackendFinalize(t) == CUDNN_STATUS_BAD_PARAM);  // no dimensions, unique id, alignment
    int64_t n = 0, uid = 0;
    CHECK(cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &n, &uid) ==
          CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    cudnnBackendDescriptor_t open = tensor_desc(o, xd, nchw(xd), 1, CUDNN_DATA_FLOAT, false);
    cudnnBackendDescriptor_t op = o.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &open) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
    CHECK(cudnnBackendFinalize(op) == CUDNN_STATUS_BAD_PARAM);  // no tensors, no convolution
    cudnnBackendDescriptor_t done = tensor_desc(o, xd, nchw(xd), 1);
    const int64_t other = 9;
    CHECK(set_i64s(done, CUDNN_ATTR_TENSOR_UNIQUE_ID, &other, 1) == CUDNN_STATUS_BAD_PARAM);
    CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &done) == CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t conv = conv_desc(o, pr);
    CHECK(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                   &conv) == CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE);
    char message[256] = {};
    cudnnGetLastErrorString(message, sizeof(message));
    CHECK(std::string(message).find("CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE") != std::string::npos);
  }
  SUBCASE("shapes that do not make a convolution") {
    auto finalize_with = [&](const Dims& x, const Dims& w, const Dims& y) {
      cudnnBackendDescriptor_t op =
          op_desc(o, Kind::kForward, conv_desc(o, pr), tensor_desc(o, x, nchw(x), 1),
                  tensor_desc(o, w, nchw(w), 2), tensor_desc(o, y, nchw(y), 3));
      return cudnnBackendFinalize(op);
    };
    CHECK(finalize_with(xd, wd, yd) == CUDNN_STATUS_SUCCESS);
    CHECK(finalize_with({2, 5, 7, 6}, wd, yd) ==
          CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);  // 5 channels, groups of 2
    CHECK(finalize_with(xd, {3, 2, 3, 2}, {2, 3, yd[2], yd[3]}) ==
          CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);  // K = 3, G = 2
    CHECK(finalize_with(xd, wd, {2, 4, yd[2] + 1, yd[3]}) == CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
    CHECK(finalize_with(xd, wd, {1, 4, yd[2], yd[3]}) == CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH);
  }
  SUBCASE("two tensors of one graph with one unique id") {
    cudnnBackendDescriptor_t op =
        op_desc(o, Kind::kForward, conv_desc(o, pr), tensor_desc(o, xd, nchw(xd), 1),
                tensor_desc(o, wd, nchw(wd), 1), tensor_desc(o, yd, nchw(yd), 3));
    REQUIRE(cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS);
    cudnnBackendDescriptor_t g = o.make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    REQUIRE(cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                     &op) == CUDNN_STATUS_SUCCESS);
    CHECK(cudnnBackendFinalize(g) == CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES);
  }
  SUBCASE("types no engine runs: the heuristic has no configuration, a hand-made one does not finalize") {
    struct Types {
      cudnnDataType_t x, y, compute;
    };
    for (Types t : {Types{CUDNN_DATA_INT32, CUDNN_DATA_INT32, CUDNN_DATA_INT32},
                    Types{CUDNN_DATA_HALF, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT},
                    Types{CUDNN_DATA_HALF, CUDNN_DATA_HALF, CUDNN_DATA_HALF},
                    Types{CUDNN_DATA_DOUBLE, CUDNN_DATA_DOUBLE, CUDNN_DATA_FLOAT}}) {
      CAPTURE(t.x);
      CAPTURE(t.compute);
      cudnnBackendDescriptor_t op =
          op_desc(o, Kind::kForward, conv_desc(o, pr, t.compute), tensor_desc(o, xd, nchw(xd), 1, t.x),
                  tensor_desc(o, wd, nchw(wd), 2, t.x), tensor_desc(o, yd, nchw(yd), 3, t.y));
      REQUIRE(cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS);
      cudnnBackendDescriptor_t g = graph_of(o, handle.h, op);
      int64_t found = -1;
      cudnnBackendDescriptor_t config = nullptr;
      heuristic(o, g, found, config);
      CHECK(found == 0);
      cudnnBackendDescriptor_t engine = o.make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      const int64_t index = 0;
      REQUIRE(cudnnBackendSetAttribute(engine, CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &g) == CUDNN_STATUS_SUCCESS);
      REQUIRE(set_i64s(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, &index, 1) == CUDNN_STATUS_SUCCESS);
      REQUIRE(cudnnBackendFinalize(engine) == CUDNN_STATUS_SUCCESS);
      cudnnBackendDescriptor_t cfg = o.make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
      REQUIRE(cudnnBackendSetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                       &engine) == CUDNN_STATUS_SUCCESS);
      CHECK(cudnnBackendFinalize(cfg) == CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE);
    }
  }
}

TEST_CASE("emulated cuDNN: execution rules, with cuDNN's status") {
  LOOM_REQUIRE_GPU();
  Handle handle;
  Owned o;
  Problem pr;
  const Dims xd = pr.x_dims(), wd = pr.w_dims(), yd = pr.y_dims();
  cudnnBackendDescriptor_t op = op_desc(o, Kind::kForward, conv_desc(o, pr), tensor_desc(o, xd, nchw(xd), 1),
                                        tensor_desc(o, wd, nchw(wd), 2), tensor_desc(o, yd, nchw(yd), 3));
  REQUIRE(cudnnBackendFinalize(op) == CUDNN_STATUS_SUCCESS);
  int64_t ws_bytes = 0;
  cudnnBackendDescriptor_t plan = plan_of(o, handle.h, graph_of(o, handle.h, op), ws_bytes);
  CHECK(ws_bytes == yd[0] * yd[1] * yd[2] * yd[3] * 4);  // the float accumulator of the output
  Tensor x = device_tensor(values(xd, 0.1), xd, false, kFloat32),
         w = device_tensor(values(wd, 1.3), wd, false, kFloat32),
         y = device_tensor(values(yd, 2.7), yd, false, kFloat32);
  Tensor ws = empty({ws_bytes}, TensorOptions(kUInt8).device(Device::cuda()));
  // Its own cudaMalloc: the caching allocator's blocks lie inside larger allocations.
  void* small_ws = nullptr;
  REQUIRE(cudaMalloc(&small_ws, static_cast<size_t>(ws_bytes / 2)) == cudaSuccess);
  void* misaligned = static_cast<char*>(y.data_ptr()) + 2;

  CHECK(cudnnBackendExecute(handle.h, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()},
                                    ws.data_ptr())) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnBackendExecute(nullptr, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()},
                                    ws.data_ptr())) == CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(
      cudnnBackendExecute(handle.h, plan, pack_of(o, {1, 2}, {x.data_ptr(), w.data_ptr()}, ws.data_ptr())) ==
      CUDNN_STATUS_BAD_PARAM);  // y's unique id is missing
  CHECK(cudnnBackendExecute(handle.h, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), nullptr, y.data_ptr()}, ws.data_ptr())) ==
        CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  CHECK(cudnnBackendExecute(handle.h, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()}, nullptr)) ==
        CUDNN_STATUS_BAD_PARAM_NULL_POINTER);  // the plan needs a workspace
  CHECK(cudnnBackendExecute(handle.h, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()}, small_ws)) ==
        CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT);
  CHECK(cudaFree(small_ws) == cudaSuccess);
  CHECK(cudnnBackendExecute(handle.h, plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), misaligned}, ws.data_ptr())) ==
        CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER);
  cudnnBackendDescriptor_t open_plan = o.make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  CHECK(cudnnBackendExecute(handle.h, open_plan,
                            pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), y.data_ptr()},
                                    ws.data_ptr())) == CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED);
  cudnnBackendDescriptor_t uneven = o.make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[2] = {1, 2};
  void* one[1] = {x.data_ptr()};
  REQUIRE(cudnnBackendSetAttribute(uneven, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 2, uids) ==
          CUDNN_STATUS_SUCCESS);
  REQUIRE(cudnnBackendSetAttribute(uneven, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 1,
                                   one) == CUDNN_STATUS_SUCCESS);
  CHECK(cudnnBackendFinalize(uneven) == CUDNN_STATUS_BAD_PARAM);
  // A host pointer in the pack faults as on a GPU: a loom::Error naming the illegal address.
  std::vector<float> host(static_cast<size_t>(yd[0] * yd[1] * yd[2] * yd[3]));
  CHECK_THROWS_WITH_AS(
      cudnnBackendExecute(handle.h, plan,
                          pack_of(o, {1, 2, 3}, {x.data_ptr(), w.data_ptr(), host.data()}, ws.data_ptr())),
      doctest::Contains("cudaErrorIllegalAddress"), Error);
}

#endif  // LOOM_CUDA_EMULATED
