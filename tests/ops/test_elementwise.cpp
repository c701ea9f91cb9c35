/*
 * Elementwise ops: values against float64 references computed here (and a few literals from
 * PyTorch 1.13), every dtype class, broadcasting, non-contiguous views, 0-dim and empty
 * tensors, PyTorch's type promotion, the in-place rules, and the errors.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "ops/cpu/array_kernels.h"
#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// n values spread irregularly over [lo, hi].
std::vector<double> spread(int64_t n, double lo, double hi) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    double f = std::fmod(static_cast<double>(i) * 0.6180339887498949 + 0.1234, 1.0);
    v[static_cast<size_t>(i)] = lo + (hi - lo) * f;
  }
  return v;
}

using Unary = std::function<Tensor(const Tensor&)>;
using UnaryRef = std::function<double(double)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
using BinaryRef = std::function<double(double, double)>;

// op(x) against ref applied to x's (already rounded) values; output dtype `out_dtype`.
void check_unary(const Unary& op, const UnaryRef& ref, const Tensor& x, DType out_dtype) {
  Tensor y = op(x);
  CHECK(y.dtype() == out_dtype);
  CHECK(y.sizes() == x.sizes());
  std::vector<double> expected;
  for (double v : values(x)) expected.push_back(ref(v));
  check_close(y, expected, tol_for(out_dtype));
}

// The same op on x laid out four ways: contiguous, transposed, sliced with a step, expanded.
void check_unary_layouts(const Unary& op, const UnaryRef& ref, const std::vector<double>& data, DType dtype,
                         DType out_dtype) {
  const int64_t n = static_cast<int64_t>(data.size());
  Tensor flat = make(data, dtype);
  {
    INFO("contiguous");
    check_unary(op, ref, flat, out_dtype);
  }
  {
    INFO("transposed");
    check_unary(op, ref, flat.narrow(0, 0, (n / 8) * 8).view({8, n / 8}).t(), out_dtype);
  }
  {
    INFO("sliced with step");
    check_unary(op, ref, flat.slice(0, 1, n, 3), out_dtype);
  }
  {
    INFO("expanded");
    check_unary(op, ref, flat.narrow(0, 0, 7).view({7, 1}).expand({7, 5}), out_dtype);
  }
}

// Row-major broadcast of two shapes, computed independently of loom.
std::vector<double> broadcast_ref(const std::vector<double>& va, IntArrayRef sa, const std::vector<double>& vb,
                                  IntArrayRef sb, const BinaryRef& f, std::vector<int64_t>& out_shape) {
  size_t nd = std::max(sa.size(), sb.size());
  std::vector<int64_t> da(nd, 1), db(nd, 1);
  for (size_t i = 0; i < sa.size(); ++i) da[nd - sa.size() + i] = sa[i];
  for (size_t i = 0; i < sb.size(); ++i) db[nd - sb.size() + i] = sb[i];
  out_shape.assign(nd, 1);
  int64_t total = 1;
  for (size_t i = 0; i < nd; ++i) {
    out_shape[i] = da[i] == 1 ? db[i] : da[i];
    total *= out_shape[i];
  }
  std::vector<double> out(static_cast<size_t>(total));
  std::vector<int64_t> idx(nd, 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t ia = 0, ib = 0;
    for (size_t i = 0; i < nd; ++i) {
      ia = ia * da[i] + (da[i] == 1 ? 0 : idx[i]);
      ib = ib * db[i] + (db[i] == 1 ? 0 : idx[i]);
    }
    out[static_cast<size_t>(k)] = f(va[static_cast<size_t>(ia)], vb[static_cast<size_t>(ib)]);
    for (size_t i = nd; i-- > 0;) {
      if (++idx[i] < out_shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

void check_binary(const Binary& op, const BinaryRef& ref, const Tensor& a, const Tensor& b, DType out_dtype,
                  std::optional<Tol> tol = {}) {
  Tensor y = op(a, b);
  CHECK(y.dtype() == out_dtype);
  std::vector<int64_t> shape;
  std::vector<double> expected = broadcast_ref(values(a), a.sizes(), values(b), b.sizes(), ref, shape);
  CHECK(y.sizes() == IntArrayRef(shape));
  check_close(y, expected, tol.value_or(tol_for(out_dtype)));
}

const std::vector<DType> kFloatTypes = {kFloat32, kFloat64, kFloat16, kBFloat16};
const std::vector<DType> kIntTypes = {kInt8, kUInt8, kInt32, kInt64};

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

struct UnaryCase {
  const char* name;
  Unary op;
  UnaryRef ref;
  double lo, hi;
};

const std::vector<UnaryCase>& floating_unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -10, 10},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 1e-3, 100},
      {"log1p", [](const Tensor& x) { return log1p(x); }, [](double v) { return std::log1p(v); }, -0.9, 50},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0, 100},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 1e-2, 100},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -10, 10},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -10, 10},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -6, 6},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, -30, 30},
      {"silu", [](const Tensor& x) { return silu(x); }, [](double v) { return v * sigmoid_ref(v); }, -30, 30},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, -8, 8},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }, gelu_tanh_ref, -8, 8},
  };
  return cases;
}

}  // namespace

// ---- unary ----------------------------------------------------------------------------------------

TEST_CASE("floating unary ops match float64 references for every floating dtype and layout") {
  for (const UnaryCase& c : floating_unary_cases()) {
    for (DType dtype : kFloatTypes) {
      std::string name = c.name;
      CAPTURE(name);
      CAPTURE(dtype);
      // 5003 elements: vector body, scalar tail, and two parallel chunks for transcendental ops.
      check_unary_layouts(c.op, c.ref, spread(5003, c.lo, c.hi), dtype, dtype);
    }
  }
}

TEST_CASE("floating unary ops at special values") {
  Tensor x = make({0.0, -0.0, kInf, -kInf, kNaN, 1e-30, -1e-30}, kFloat32);
  check_close(exp(x), {1, 1, kInf, 0, kNaN, 1, 1});
  check_close(log(make({0.0, -1.0, kInf, 1.0}, kFloat32)), {-kInf, kNaN, kInf, 0});
  check_close(sqrt(make({0.0, 4.0, -1.0, kInf}, kFloat32)), {0, 2, kNaN, kInf});
  check_close(rsqrt(make({0.0, 4.0, kInf}, kFloat32)), {kInf, 0.5, 0});
  check_close(tanh(make({-kInf, kInf, 100.0, -100.0}, kFloat32)), {-1, 1, 1, -1});
  check_close(sigmoid(make({-kInf, kInf, -200.0, 200.0}, kFloat32)), {0, 1, 0, 1});
  check_close(silu(make({-200.0, 200.0}, kFloat32)), {0, 200});
  // Square roots are correctly rounded: exact results stay exact.
  std::vector<double> squares;
  for (int i = 0; i < 100; ++i) squares.push_back(i * i);
  std::vector<double> roots;
  for (int i = 0; i < 100; ++i) roots.push_back(i);
  check_close(sqrt(make(squares, kFloat32)), roots, Tol{0, 0});
  check_close(sqrt(make(squares, kFloat64)), roots, Tol{0, 0});
}

TEST_CASE("floating unary ops promote integer and bool inputs to float32") {
  Tensor i = make({-3, -1, 0, 2, 5}, kInt64);
  check_unary([](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, i, kFloat32);
  check_unary([](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, i, kFloat32);
  check_unary([](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, i, kFloat32);
  check_unary([](const Tensor& x) { return sigmoid(x); }, sigmoid_ref, make({-3, 0, 7}, kInt8), kFloat32);
  check_unary([](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); },
              make({0, 1, 4, 200}, kUInt8), kFloat32);
  check_unary([](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); },
              make({1, 0, 1}, kBool), kFloat32);
  // silu and gelu are floating-only, as in PyTorch.
  CHECK_THROWS_WITH_AS(silu(i), doctest::Contains("silu"), Error);
  CHECK_THROWS_WITH_AS(gelu(i), doctest::Contains("gelu"), Error);
}

TEST_CASE("neg, abs, sign and relu keep the dtype, for floats and integers") {
  std::vector<double> data = spread(300, -100, 100);
  data[3] = 0;
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kInt32, kInt64}) {
    CAPTURE(dtype);
    std::vector<double> d = data;
    if (!is_floating(dtype))
      for (double& v : d) v = std::trunc(v);
    check_unary_layouts([](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, d, dtype, dtype);
    check_unary_layouts([](const Tensor& x) { return abs(x); }, [](double v) { return std::fabs(v); }, d, dtype,
                        dtype);
    check_unary_layouts([](const Tensor& x) { return sign(x); }, [](double v) { return (v > 0) - (v < 0); }, d,
                        dtype, dtype);
    check_unary_layouts([](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0; }, d, dtype,
                        dtype);
  }
}

TEST_CASE("neg, abs, sign and relu on uint8 and bool, and NaN handling") {
  Tensor u = make({0, 1, 2, 255}, kUInt8);
  check_close(neg(u), {0, 255, 254, 1});  // wraps, as PyTorch
  check_close(abs(u), {0, 1, 2, 255});
  check_close(sign(u), {0, 1, 1, 1});
  check_close(relu(u), {0, 1, 2, 255});
  Tensor b = make({1, 0}, kBool);
  Tensor sb = sign(b);
  CHECK(sb.dtype() == kBool);
  check_close(sb, {1, 0});
  CHECK_THROWS_WITH_AS(neg(b), doctest::Contains("neg"), Error);
  CHECK_THROWS_WITH_AS(-b, doctest::Contains("logical_not"), Error);
  CHECK_THROWS_WITH_AS(abs(b), doctest::Contains("abs"), Error);
  CHECK_THROWS_WITH_AS(relu(b), doctest::Contains("relu"), Error);
  Tensor f = make({kNaN, -0.0, -kInf}, kFloat32);
  check_close(relu(f), {kNaN, 0, 0});
  check_close(sign(f), {0, 0, -1});  // sign(NaN) = 0 as PyTorch
  check_close(abs(f), {kNaN, 0, kInf});
}

TEST_CASE("logical_not returns bool for every dtype") {
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor x = make({0, 1, 0, 1, 1}, dtype);
    if (dtype != kBool && dtype != kUInt8) x = make({0, -2, 0, 3, 1}, dtype);
    Tensor y = logical_not(x);
    CHECK(y.dtype() == kBool);
    check_close(y, {1, 0, 1, 0, 0});
    check_close(x.t().logical_not(), {1, 0, 1, 0, 0});
  }
  check_close(logical_not(make({kNaN, 0.5}, kFloat32)), {0, 0});
}

TEST_CASE("gelu rejects an unknown approximation") {
  Tensor x = make({1, 2}, kFloat32);
  CHECK_THROWS_WITH_AS(gelu(x, "erf"), doctest::Contains("gelu"), Error);
  CHECK_THROWS_WITH_AS(x.gelu("Tanh"), doctest::Contains("\"Tanh\""), Error);
}

TEST_CASE("gelu_backward matches PyTorch's gelu gradient, contiguous, strided and in float32") {
  // torch 1.13: x = [-3, -1.5, -0.5, 0, 0.25, 1, 2.5] (float64), g = [1, -2, 0.5, 3, 1.5, -1, 0.75],
  // torch.autograd.grad(F.gelu(x, approximate=a), x, g)
  const std::vector<double> xs{-3.0, -1.5, -0.5, 0.0, 0.25, 1.0, 2.5}, gs{1.0, -2.0, 0.5, 3.0, 1.5, -1.0, 0.75};
  const std::vector<double> erf_form{-0.011945647204184, 0.254938384459959, 0.066252437671919, 1.5,
                                     1.043060032325454,  -1.083315470587686, 0.778208314431109};
  const std::vector<double> tanh_form{-0.01158416663097, 0.255421586302866, 0.066315048232679, 1.5,
                                      1.043031142726591, -1.082964083845783, 0.7784636821595};
  Tensor x = make(xs, {7}), g = make(gs, {7});
  check_close(gelu_backward(g, x), erf_form, Tol{1e-12, 1e-14});
  check_close(gelu_backward(g, x, "tanh"), tanh_form, Tol{1e-12, 1e-14});
  // Strided views of the same values take the gathering path.
  Tensor x2 = make(xs, {7}).unsqueeze(1).expand({7, 2}).select(1, 1), g2 = make(gs, {7}).unsqueeze(1).expand({7, 2}).select(1, 0);
  check_close(gelu_backward(g2, x2), erf_form, Tol{1e-12, 1e-14});
  check_close(gelu_backward(g.to(kFloat32), x.to(kFloat32), "tanh"), tanh_form, Tol{2e-6, 1e-6});
  CHECK_THROWS_WITH_AS(gelu_backward(make({1, 2, 3}, {3}), x), doctest::Contains("same shape"), Error);
}

TEST_CASE("threshold_backward: grad where self > threshold, else 0, as PyTorch computes relu's gradient") {
  // torch 1.13's torch.ops.aten.threshold_backward(g, x, t) gives these (float64 and float32): g
  // where x > t, else 0; a NaN in x passes g on (x <= t is false).
  const std::vector<double> xs{-2.0, -0.0, 0.0, 0.5, NAN, 0.25, 3.0, -0.5, 0.3, 1.0};
  const std::vector<double> gs{1.0, 2.0, 3.0, -4.0, 5.0, 6.0, -7.0, 8.0, 9.0, 10.0};
  const std::vector<double> at_zero{0, 0, 0, -4, 5, 6, -7, 0, 9, 10},
      at_quarter{0, 0, 0, -4, 5, 0, -7, 0, 9, 10}, at_minus{0, 2, 3, -4, 5, 6, -7, 0, 9, 10};
  for (DType dtype : {kFloat64, kFloat32, kBFloat16, kFloat16}) {
    CAPTURE(dtype);
    Tensor x = make(xs, {10}, dtype), g = make(gs, {10}, dtype);
    Tensor r = threshold_backward(g, x, 0.0);
    CHECK(r.dtype() == dtype);
    check_close(r, at_zero, Tol{0, 0});
    check_close(threshold_backward(g, x, 0.25), at_quarter, Tol{0, 0});
    check_close(threshold_backward(g, x, -0.5), at_minus, Tol{0, 0});
  }
  // Compared in self's dtype: the threshold 0.3 rounds to 0.30078125 in bfloat16 and to 0.3f in
  // float32, so self = 0.3 in those dtypes is not above it, though above 0.3 in float64.
  CHECK(threshold_backward(make({1.0}, {1}, kBFloat16), make({0.3}, {1}, kBFloat16), 0.3).item<double>() ==
        0.0);
  CHECK(threshold_backward(make({1.0}, {1}, kFloat32), make({0.3}, {1}, kFloat32), 0.3).item<double>() == 0.0);
  // Strided operands (a transposed grad, an expanded self) take the strided loop; large ones
  // run in parallel chunks and stream.
  Tensor x2 = make(xs, {10}).unsqueeze(1).expand({10, 3});
  Tensor g2 = make(gs, {10}).unsqueeze(0).expand({3, 10}).t();
  check_close(threshold_backward(g2, x2, 0.0).select(1, 2), at_zero, Tol{0, 0});
  Tensor big = randn({1 << 21}), gbig = randn({1 << 21});
  CHECK(equal(threshold_backward(gbig, big, 0.1), where(big.gt(0.1), gbig, 0.0)));
  // Mixed dtypes promote; shapes, devices and integer dtypes are checked.
  CHECK(threshold_backward(make(gs, {10}, kFloat32), make(xs, {10}), 0.0).dtype() == kFloat64);
  CHECK_THROWS_WITH_AS(threshold_backward(make({1, 2, 3}, {3}), make(xs, {10}), 0.0),
                       doctest::Contains("threshold_backward: expected grad and input of the same shape"),
                       Error);
  CHECK_THROWS_WITH_AS(threshold_backward(make({1, 2}, {2}, kInt64), make({1, 2}, {2}, kInt32), 0.0),
                       doctest::Contains("threshold_backward: expected floating-point"), Error);
  CHECK_THROWS_WITH_AS(threshold_backward(Tensor(), make(xs, {10}), 0.0), doctest::Contains("undefined"),
                       Error);
}

TEST_CASE("clamp") {
  std::vector<double> data = spread(1000, -10, 10);
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype);
    auto both = [](const Tensor& x) { return clamp(x, -2.5, 3); };
    auto lo = [](const Tensor& x) { return clamp(x, -2.5); };
    auto hi = [](const Tensor& x) { return clamp(x, std::nullopt, 3); };
    check_unary_layouts(both, [](double v) { return std::min(std::max(v, -2.5), 3.0); }, data, dtype, dtype);
    check_unary_layouts(lo, [](double v) { return std::max(v, -2.5); }, data, dtype, dtype);
    check_unary_layouts(hi, [](double v) { return std::min(v, 3.0); }, data, dtype, dtype);
  }
  Tensor i = make({-5, 0, 2, 9}, kInt32);
  Tensor ci = clamp(i, 0, 4);
  CHECK(ci.dtype() == kInt32);
  check_close(ci, {0, 0, 2, 4});
  // A floating bound promotes an integer tensor (PyTorch 1.13: clamp(int64, 0.5) is float32).
  Tensor cf = clamp(make({1, 2}, kInt64), 1.5);
  CHECK(cf.dtype() == kFloat32);
  check_close(cf, {1.5, 2});
  // min > max gives max everywhere; NaN inputs and NaN bounds give NaN.
  Tensor f = make({1, 2, kNaN}, kFloat32);
  check_close(clamp(f, 1.5, 1.0), {1, 1, kNaN});
  check_close(clamp(f, 1.5, kNaN), {kNaN, kNaN, kNaN});
  CHECK_THROWS_WITH_AS(clamp(f, std::nullopt, std::nullopt), doctest::Contains("clamp"), Error);
  // bool with an int bound computes in int64 (PyTorch: tensor([True, False]).clamp(0) == [1, 0]);
  // with a bool bound it stays bool, which clamp does not support.
  Tensor cb = clamp(make({1, 0}, kBool), 0);
  CHECK(cb.dtype() == kInt64);
  check_close(cb, {1, 0});
  CHECK_THROWS_WITH_AS(clamp(make({1, 0}, kBool), true), doctest::Contains("clamp"), Error);
}

// ---- binary -----------------------------------------------------------------------------------

namespace {

struct BinaryCase {
  const char* name;
  Binary op;
  BinaryRef ref;
};

const std::vector<BinaryCase>& arithmetic_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return a + b; }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return a - b; }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return a * b; }, [](double a, double b) { return a * b; }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }},
  };
  return cases;
}

}  // namespace

TEST_CASE("add, sub, mul, maximum, minimum: every dtype, broadcast, non-contiguous") {
  for (const BinaryCase& c : arithmetic_cases()) {
    for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64}) {
      std::string name = c.name;
      CAPTURE(name);
      CAPTURE(dtype);
      bool fl = is_floating(dtype);
      auto data = [&](int64_t n, double lo, double hi) {
        std::vector<double> v = spread(n, lo, hi);
        if (!fl)
          for (double& x : v) x = std::trunc(x);
        return v;
      };
      // Integer ranges keep results in range; uint8 differences wrap modulo 256 (as PyTorch).
      double lo = dtype == kUInt8 ? 0 : -10, hi = 10;
      BinaryRef ref = c.ref;
      if (dtype == kUInt8) ref = [f = c.ref](double x, double y) { return std::fmod(f(x, y) + 256.0, 256.0); };
      Tensor a = make(data(12, lo, hi), {3, 4}, dtype);
      Tensor b = make(data(12, lo, hi), {3, 4}, dtype);
      check_binary(c.op, ref, a, b, dtype);
      // [3, 1] with [4] -> [3, 4]
      Tensor col = make(data(3, lo, hi), {3, 1}, dtype);
      Tensor row = make(data(4, lo, hi), {4}, dtype);
      check_binary(c.op, ref, col, row, dtype);
      check_binary(c.op, ref, row, col.t().t(), dtype);
      // transposed and sliced-with-step operands
      Tensor big = make(data(40, lo, hi), {5, 8}, dtype);
      Tensor small = make(data(40, lo, hi), {8, 5}, dtype);
      check_binary(c.op, ref, big, small.t(), dtype);
      check_binary(c.op, ref, big.slice(1, 0, 8, 2), small.t().slice(1, 1, 8, 2), dtype);
      // expanded operand and a 0-dim operand
      check_binary(c.op, ref, big, small.select(0, 2).view({5, 1}).expand({5, 8}), dtype);
      check_binary(c.op, ref, big, make({3.0}, dtype).view({}), dtype);
      check_binary(c.op, ref, make({3.0}, dtype).view({}), big.t(), dtype);
    }
  }
}

TEST_CASE("binary ops on large tensors: parallel chunks and streaming stores") {
  // 1.2M float32 outputs (> 4 MB) take the streaming path; the odd offset misaligns them.
  const int64_t n = 1200007;
  std::vector<double> va = spread(n + 1, -100, 100), vb = spread(n + 1, -3, 3);
  Tensor a = make(va, kFloat32).narrow(0, 1, n), b = make(vb, kFloat32).narrow(0, 0, n);
  Tensor c = a + b;
  std::vector<double> av = values(a), bv = values(b), expected(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] = av[static_cast<size_t>(i)] + bv[static_cast<size_t>(i)];
  check_close(c, expected);
  for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] = av[static_cast<size_t>(i)] * 2.5;
  check_close(a * 2.5, expected);
  for (int64_t i = 0; i < n; ++i) expected[static_cast<size_t>(i)] = std::exp(bv[static_cast<size_t>(i)]);
  check_close(exp(b), expected);
  // 70000 elements: below the streaming threshold, above the parallel grain.
  Tensor p = make(spread(70000, -5, 5), kFloat64);
  Tensor q = make(spread(70000, 1, 2), kFloat64);
  check_binary([](const Tensor& x, const Tensor& y) { return x / y; }, [](double x, double y) { return x / y; },
               p, q, kFloat64);
  Tensor g = gt(p, q.view({1, 70000}));
  std::vector<double> gv = values(g), pv = values(p), qv = values(q);
  std::vector<double> ge;
  for (int64_t i = 0; i < 70000; ++i) ge.push_back(pv[static_cast<size_t>(i)] > qv[static_cast<size_t>(i)]);
  check_close(g, ge);
}

TEST_CASE("integer arithmetic wraps like PyTorch") {
  check_close(make({100, -100}, kInt8) + make({100, -100}, kInt8), {-56, 56});
  check_close(make({250}, kUInt8) + make({10}, kUInt8), {4});
  check_close(make({3}, kUInt8) - make({5}, kUInt8), {254});
}

TEST_CASE("bool arithmetic: add is or, mul is and, sub is an error") {
  Tensor a = make({1, 1, 0, 0}, kBool), b = make({1, 0, 1, 0}, kBool);
  Tensor s = a + b;
  CHECK(s.dtype() == kBool);
  check_close(s, {1, 1, 1, 0});
  check_close(a * b, {1, 0, 0, 0});
  check_close(maximum(a, b), {1, 1, 1, 0});
  check_close(minimum(a, b), {1, 0, 0, 0});
  CHECK_THROWS_WITH_AS(a - b, doctest::Contains("sub"), Error);
  CHECK_THROWS_WITH_AS(pow(a, b), doctest::Contains("pow"), Error);
  Tensor d = a / b;  // true division: float32 (0/0 = NaN, 1/0 = inf)
  CHECK(d.dtype() == kFloat32);
  check_close(d, {1, kInf, 0, kNaN});
}

TEST_CASE("div is true division") {
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype);
    Tensor a = make(spread(60, -10, 10), {6, 10}, dtype), b = make(spread(10, 0.5, 4), {10}, dtype);
    check_binary([](const Tensor& x, const Tensor& y) { return x / y; }, [](double x, double y) { return x / y; },
                 a, b, dtype);
    check_binary([](const Tensor& x, const Tensor& y) { return div(x, y); },
                 [](double x, double y) { return x / y; }, a.t(), b.view({10, 1}), dtype);
  }
  // int / int -> float32 (PyTorch: tensor([1, 2]).div(2) == [0.5, 1.0])
  Tensor q = make({1, 2, -7}, kInt64) / make({2, 2, 2}, kInt64);
  CHECK(q.dtype() == kFloat32);
  check_close(q, {0.5, 1, -3.5});
  Tensor qs = make({1, 2}, kInt64).div(2);
  CHECK(qs.dtype() == kFloat32);
  check_close(qs, {0.5, 1});
  Tensor r = 1 / make({4, 0}, kInt32);
  CHECK(r.dtype() == kFloat32);
  check_close(r, {0.25, kInf});
  check_close(make({1.0, -1.0, 0.0}, kFloat64) / 0.0, {kInf, -kInf, kNaN});
}

TEST_CASE("pow") {
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype);
    Tensor base = make(spread(50, 0.1, 4), {5, 10}, dtype);
    Tensor expo = make(spread(10, -2, 3), {10}, dtype);
    auto ref = [](double x, double y) { return std::pow(x, y); };
    check_binary([](const Tensor& x, const Tensor& y) { return pow(x, y); }, ref, base, expo, dtype);
    check_binary([](const Tensor& x, const Tensor& y) { return pow(x, y); }, ref, base.t(), expo.view({10, 1}),
                 dtype);
    // The scalar-exponent shortcuts and the general path.
    for (double e : {2.0, 3.0, 0.5, -0.5, -1.0, -2.0, 1.0, 0.0, 1.7, -3.2}) {
      CAPTURE(e);
      // The exponent is converted to the compute dtype (1.7 is 1.703125 in bfloat16).
      double er = values(make({e}, dtype))[0];
      check_unary([e](const Tensor& x) { return pow(x, e); }, [er](double x) { return std::pow(x, er); }, base,
                  dtype);
      check_unary([e](const Tensor& x) { return x.pow(e); }, [er](double x) { return std::pow(x, er); },
                  base.t(), dtype);
    }
  }
  // Integers: exact, negative exponents in a tensor truncate 1 / base (PyTorch:
  // tensor([-1, 1, 2, 0]) ** tensor([-1, -3, -2, -1]) == [-1, 1, 0, 0]; [2, 3] ** [-1, 2] == [0, 9]).
  Tensor p = pow(make({-1, 1, 2, 0}, kInt64), make({-1, -3, -2, -1}, kInt64));
  CHECK(p.dtype() == kInt64);
  check_close(p, {-1, 1, 0, 0});
  check_close(pow(make({2, 3}, kInt64), make({-1, 2}, kInt64)), {0, 9});
  check_close(pow(make({2, -3, 5}, kInt32), 3), {8, -27, 125});
  check_close(pow(make({3}, kInt64), 39), {4052555153018976267.0});
  check_close(pow(make({2}, kInt8), 7), {-128});  // wraps
  CHECK_THROWS_WITH_AS(pow(make({2, 3}, kInt64), -1), doctest::Contains("negative integer powers"), Error);
  // Scalar base (PyTorch: pow(2, tensor([1, 2])) is int64 [2, 4]; pow(2.5, ...) is float32).
  Tensor sb = pow(2, make({1, 2}, kInt64));
  CHECK(sb.dtype() == kInt64);
  check_close(sb, {2, 4});
  Tensor fb = pow(2.5, make({1, 2}, kInt64));
  CHECK(fb.dtype() == kFloat32);
  check_close(fb, {2.5, 6.25});
  Tensor fe = pow(make({1, 2}, kInt64), 2.5);
  CHECK(fe.dtype() == kFloat32);
  check_close(fe, {1, 5.656854152679443});
  // bool ** int scalar -> int64 (PyTorch: tensor([True, False]) ** 2 == [1, 0])
  Tensor bp = pow(make({1, 0}, kBool), 2);
  CHECK(bp.dtype() == kInt64);
  check_close(bp, {1, 0});
}

TEST_CASE("maximum and minimum propagate NaN") {
  Tensor a = make({1, kNaN, 3, kNaN}, kFloat32), b = make({kNaN, 0, 2, kNaN}, kFloat32);
  check_close(maximum(a, b), {kNaN, kNaN, 3, kNaN});
  check_close(minimum(a, b), {kNaN, kNaN, 2, kNaN});
}

TEST_CASE("add and sub with alpha") {
  Tensor a = make(spread(12, -5, 5), {3, 4}, kFloat32), b = make(spread(4, -2, 2), {4}, kFloat32);
  check_binary([](const Tensor& x, const Tensor& y) { return add(x, y, 2.5); },
               [](double x, double y) { return x + 2.5 * y; }, a, b, kFloat32);
  check_binary([](const Tensor& x, const Tensor& y) { return sub(x, y, 2.5); },
               [](double x, double y) { return x - 2.5 * y; }, a, b, kFloat32);
  check_binary([](const Tensor& x, const Tensor& y) { return x.add(y, -1); },
               [](double x, double y) { return x - y; }, a, b, kFloat32);
  check_binary([](const Tensor& x, const Tensor& y) { return x.sub(y, -1); },
               [](double x, double y) { return x + y; }, a, b, kFloat32);
  Tensor i = make({1, 2}, kInt32), j = make({1, 2}, kInt32);
  Tensor r = add(i, j, 3);
  CHECK(r.dtype() == kInt32);
  check_close(r, {4, 8});
  // bool b with an int alpha keeps a's dtype
  Tensor rb = add(i, make({1, 0}, kBool), 5);
  CHECK(rb.dtype() == kInt32);
  check_close(rb, {6, 2});
  // PyTorch: float alpha with integral tensors, and bool alpha with non-bool results, are errors.
  CHECK_THROWS_WITH_AS(sub(i, j, 0.5), doctest::Contains("alpha"), Error);
  CHECK_THROWS_WITH_AS(add(i, j, true), doctest::Contains("alpha"), Error);
  Tensor h = add(make({1, 2}, kFloat16), make({1, 2}, kFloat16), 0.5);
  CHECK(h.dtype() == kFloat16);
  check_close(h, {1.5, 3});
}

TEST_CASE("scalar operands on either side") {
  Tensor x = make(spread(20, -4, 4), {4, 5}, kFloat32);
  std::vector<double> v = values(x);
  auto map = [&](auto f) {
    std::vector<double> out;
    for (double e : v) out.push_back(f(e));
    return out;
  };
  check_close(x + 2, map([](double e) { return e + 2; }));
  check_close(2 + x, map([](double e) { return e + 2; }));
  check_close(x - 1.5, map([](double e) { return e - 1.5; }));
  check_close(1.5 - x, map([](double e) { return 1.5 - e; }));
  check_close(x * 3, map([](double e) { return e * 3; }));
  check_close(3 * x, map([](double e) { return e * 3; }));
  check_close(x / 4, map([](double e) { return e / 4; }));
  check_close(4 / x, map([](double e) { return 4 / e; }));
  check_close(-x, map([](double e) { return -e; }));
  check_close(x.t() + 2, values(x.t() + make({2}, kFloat32)));
  Tensor i = make({5, 7}, kInt64);
  Tensor d = 10 - i;
  CHECK(d.dtype() == kInt64);
  check_close(d, {5, 3});
}

TEST_CASE("comparisons and logical ops return bool") {
  struct Cmp {
    const char* name;
    Binary op;
    BinaryRef ref;
  };
  std::vector<Cmp> cmps = {
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); }, [](double a, double b) { return a == b; }},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); }, [](double a, double b) { return a != b; }},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); }, [](double a, double b) { return a < b; }},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); }, [](double a, double b) { return a <= b; }},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); }, [](double a, double b) { return a > b; }},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); }, [](double a, double b) { return a >= b; }},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); },
       [](double a, double b) { return a != 0 && b != 0; }},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); },
       [](double a, double b) { return a != 0 || b != 0; }},
  };
  for (const Cmp& c : cmps) {
    for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool}) {
      std::string name = c.name;
      CAPTURE(name);
      CAPTURE(dtype);
      std::vector<double> va = {0, 1, 2, 3, 1, 0, 2, 2, 3, 1, 0, 1}, vb = {1, 1, 0, 3};
      if (dtype == kBool) {
        for (double& e : va) e = e > 1.5 ? 1 : 0;
        for (double& e : vb) e = e > 0.5 ? 1 : 0;
      }
      Tensor a = make(va, {3, 4}, dtype), b = make(vb, {4}, dtype);
      check_binary(c.op, c.ref, a, b, kBool);
      check_binary(c.op, c.ref, a.t(), b.view({4, 1}), kBool);
      check_binary(c.op, c.ref, a.slice(1, 0, 4, 2), b.view({1, 4}).slice(1, 1, 4, 2), kBool);
    }
  }
  // Mixed dtypes compare in the promoted dtype: int64 vs 2.5 compares in float32.
  Tensor i = make({1, 2, 3}, kInt64);
  check_close(eq(i, 2.5), {0, 0, 0});
  check_close(lt(i, 2.5), {1, 1, 0});
  check_close(i.ge(2), {0, 1, 1});
  check_close(i.ne(make({1.0}, kFloat64)), {0, 1, 1});
  check_close(logical_and(make({1.5, 0}, kFloat32), make({3, 3}, kInt64)), {1, 0});
  check_close(eq(make({kNaN}, kFloat32), make({kNaN}, kFloat32)), {0});
  check_close(ne(make({kNaN}, kFloat32), make({kNaN}, kFloat32)), {1});
  check_close(gt(make({1}, kFloat32), 0.5), {1});
  check_close(le(make({1}, kFloat32), 0.5), {0});
  check_close(make({1}, kFloat32).lt(2), {1});
  check_close(make({1}, kFloat32).gt(2), {0});
  check_close(make({1}, kFloat32).le(1), {1});
  check_close(make({1}, kFloat32).eq(1), {1});
  check_close(make({1, 0}, kFloat32).logical_or(make({0, 0}, kFloat32)), {1, 0});
}

// ---- type promotion ----------------------------------------------------------------------------

TEST_CASE("result type follows PyTorch's rules for tensors, 0-dim tensors and numbers") {
  auto dim = [](DType t) { return make({1, 2}, t); };
  auto zero = [](DType t) { return make({1}, t).view({}); };
  // Dimensioned tensors promote with each other.
  CHECK((dim(kInt32) + dim(kInt64)).dtype() == kInt64);
  CHECK((dim(kFloat16) + dim(kFloat32)).dtype() == kFloat32);
  CHECK((dim(kFloat16) + dim(kBFloat16)).dtype() == kFloat32);
  CHECK((dim(kUInt8) + dim(kInt8)).dtype() == kInt32);  // PyTorch's int16, widened
  CHECK((dim(kBool) + dim(kInt8)).dtype() == kInt8);
  CHECK((dim(kInt64) + dim(kFloat16)).dtype() == kFloat16);
  // A 0-dim tensor only matters when it is of a higher category (values checked with PyTorch).
  CHECK((dim(kFloat16) + zero(kFloat32)).dtype() == kFloat16);
  CHECK((dim(kInt32) + zero(kFloat64)).dtype() == kFloat64);
  CHECK((dim(kInt32) + zero(kInt64)).dtype() == kInt32);
  CHECK((dim(kUInt8) + zero(kInt8)).dtype() == kUInt8);
  CHECK((zero(kUInt8) + zero(kInt8)).dtype() == kInt32);
  CHECK((zero(kInt32) + zero(kFloat16)).dtype() == kFloat16);
  CHECK((dim(kBool) + zero(kInt32)).dtype() == kInt32);
  // Numbers: ints keep an integral tensor's dtype, floats make it float32, bool tensors follow.
  CHECK((dim(kInt32) + 5).dtype() == kInt32);
  CHECK((dim(kInt8) * 1000).dtype() == kInt8);
  CHECK((dim(kInt32) + 2.5).dtype() == kFloat32);
  CHECK((zero(kInt32) + 2.5).dtype() == kFloat32);
  CHECK((zero(kFloat64) + 2.5).dtype() == kFloat64);
  CHECK((dim(kFloat16) * 2.0).dtype() == kFloat16);
  CHECK((dim(kBFloat16) * 2.0).dtype() == kBFloat16);
  CHECK((dim(kBool) + 2.5).dtype() == kFloat32);
  CHECK((dim(kBool) + 2).dtype() == kInt64);
  CHECK((dim(kBool) + true).dtype() == kBool);
  CHECK((zero(kFloat32) + 1).dtype() == kFloat32);
  // Values: float16 + 0-dim float32 computes in float16 (the 0-dim value is rounded).
  Tensor h = dim(kFloat16) + make({0.1}, kFloat32).view({});
  check_close(h, {1.0 + static_cast<float>(Half(0.1f)), 2.0 + static_cast<float>(Half(0.1f))});
  check_close(dim(kInt32) + 2.5, {3.5, 4.5});
  check_close(make({1, 0}, kBool) + 2, {3, 2});
}

TEST_CASE("the same-dtype path does not convert: one allocation, for the output") {
  Tensor a = make(spread(100, -1, 1), kFloat32), b = make(spread(100, -1, 1), kFloat32);
  Allocator* alloc = cpu_allocator();
  uint64_t before = alloc->stats().num_allocs;
  Tensor c = a + b;
  CHECK(alloc->stats().num_allocs - before == 1);
  before = alloc->stats().num_allocs;
  Tensor e = exp(a);
  CHECK(alloc->stats().num_allocs - before == 1);
  // In place with the same dtype writes into self: no allocation at all.
  before = alloc->stats().num_allocs;
  a.add_(b);
  a.mul_(b);
  CHECK(alloc->stats().num_allocs - before == 0);
}

// ---- where / masked_fill -------------------------------------------------------------------------

TEST_CASE("where broadcasts condition and operands and promotes them") {
  Tensor cond = make({1, 0, 1}, {3, 1}, kBool);
  for (DType dtype : {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool}) {
    CAPTURE(dtype);
    Tensor a = make({1, 0, 1, 1}, {4}, dtype), b = make({0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0}, {3, 4}, dtype);
    Tensor w = where(cond, a, b);
    CHECK(w.dtype() == dtype);
    CHECK(w.sizes() == IntArrayRef({3, 4}));
    check_close(w, {1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1});
    check_close(where(cond.t(), a.view({4, 1}), b.t()), values(where(cond.t().contiguous(), a.view({4, 1}),
                                                                      b.t().contiguous())));
  }
  Tensor c = make({1, 0}, kBool);
  // PyTorch: where(c, int64 tensor, 0.5) is float32; with 5 it stays int64; a 0-dim int64
  // tensor does not widen int32.
  Tensor w1 = where(c, make({1, 2}, kInt64), 0.5);
  CHECK(w1.dtype() == kFloat32);
  check_close(w1, {1, 0.5});
  Tensor w2 = where(c, make({1, 2}, kInt64), 5);
  CHECK(w2.dtype() == kInt64);
  check_close(w2, {1, 5});
  Tensor w3 = where(c, make({1, 2}, kInt32), make({5}, kInt64).view({}));
  CHECK(w3.dtype() == kInt32);
  check_close(w3, {1, 5});
  Tensor w4 = where(c, 7, make({1, 2}, kFloat16));
  CHECK(w4.dtype() == kFloat16);
  check_close(w4, {7, 2});
  check_close(where(c, make({1, 2}, kInt32), make({0.5, 0.25}, kFloat64)), {1, 0.25});
  // Large: both parallel chunks.
  Tensor big_cond = gt(make(spread(70001, -1, 1), kFloat32), 0);
  Tensor big = where(big_cond, 1.0, make(spread(70001, -1, 1), kFloat32));
  std::vector<double> cv = values(big_cond), xv = values(make(spread(70001, -1, 1), kFloat32)), expected;
  for (size_t k = 0; k < cv.size(); ++k) expected.push_back(cv[k] != 0 ? 1.0 : xv[k]);
  check_close(big, expected);
  CHECK_THROWS_WITH_AS(where(make({1, 0}, kFloat32), c, c), doctest::Contains("where"), Error);
  CHECK_THROWS_WITH_AS(where(c, make({1, 2, 3}, kFloat32), 0), doctest::Contains("[3]"), Error);
}

TEST_CASE("masked_fill keeps x's dtype") {
  Tensor x = make(spread(12, -3, 3), {3, 4}, kFloat32);
  Tensor mask = make({1, 0, 0, 1}, {4}, kBool);
  Tensor y = masked_fill(x, mask, -1.5);
  CHECK(y.dtype() == kFloat32);
  std::vector<double> xv = values(x), expected;
  for (size_t k = 0; k < xv.size(); ++k) expected.push_back((k % 4 == 0 || k % 4 == 3) ? -1.5 : xv[k]);
  check_close(y, expected);
  check_close(x.t().masked_fill(mask.view({4, 1}), -1.5), values(y.t()));
  // PyTorch: tensor([1, 2]).masked_fill(tensor([True, False]), 2.7) == [2, 2] (int64)
  Tensor i = make({1, 2}, kInt64).masked_fill(make({1, 0}, kBool), 2.7);
  CHECK(i.dtype() == kInt64);
  check_close(i, {2, 2});
  Tensor h = make({1, 2}, kBFloat16).masked_fill(make({0, 1}, kBool), 100);
  CHECK(h.dtype() == kBFloat16);
  check_close(h, {1, 100});
  // the mask may broadcast x
  Tensor z = masked_fill(make({0, 0, 0}, kFloat32), make({1, 0, 0, 1, 1, 0}, {2, 3}, kBool), 1);
  CHECK(z.sizes() == IntArrayRef({2, 3}));
  check_close(z, {1, 0, 0, 1, 1, 0});
  CHECK_THROWS_WITH_AS(masked_fill(x, make({1, 0, 0, 1}, kInt32), 0), doctest::Contains("masked_fill"), Error);
  CHECK_THROWS_WITH_AS(masked_fill(x, make({1, 0, 0}, kBool), 0), doctest::Contains("masked_fill"), Error);
}

// ---- 0-dim and empty ---------------------------------------------------------------------------------

TEST_CASE("0-dim and empty tensors") {
  Tensor s = make({2}, kFloat32).view({});
  Tensor r = s * s + 1;
  CHECK(r.dim() == 0);
  CHECK(r.item<float>() == 5.0f);
  CHECK(exp(s).dim() == 0);
  CHECK(exp(s).item<double>() == doctest::Approx(std::exp(2.0)));
  Tensor m = make({1, 2, 3}, kFloat32) * s;
  CHECK(m.sizes() == IntArrayRef({3}));
  check_close(m, {2, 4, 6});
  Tensor e = empty({0, 3}, kFloat32);
  CHECK((e + e).sizes() == IntArrayRef({0, 3}));
  CHECK((e + make({1, 2, 3}, kFloat32)).sizes() == IntArrayRef({0, 3}));
  CHECK(exp(e).sizes() == IntArrayRef({0, 3}));
  CHECK(gt(e, 0).dtype() == kBool);
  CHECK(where(gt(e, 0), e, 1).numel() == 0);
  CHECK(clamp(e, 0).numel() == 0);
  CHECK(e.add_(1).numel() == 0);
  CHECK(equal(e, empty({0, 3}, kInt32)));
  CHECK(allclose(e, e));
}

// ---- in place --------------------------------------------------------------------------------------

TEST_CASE("in-place ops write into self and bump the version") {
  for (DType dtype : kFloatTypes) {
    CAPTURE(dtype);
    Tensor x = make(spread(12, 0.5, 3), {3, 4}, dtype);
    std::vector<double> v = values(x);
    Tensor y = make(spread(4, 0.5, 2), {4}, dtype);
    std::vector<double> w = values(y);
    void* ptr = x.data_ptr();
    uint64_t version = x.version();
    Tensor& ret = x.add_(y);
    CHECK(&ret == &x);
    CHECK(x.data_ptr() == ptr);
    CHECK(x.version() > version);
    std::vector<double> expected;
    for (size_t k = 0; k < v.size(); ++k) expected.push_back(v[k] + w[k % 4]);
    check_close(x, expected);
    v = values(x);
    version = x.version();
    x *= 2;
    CHECK(x.version() > version);
    for (size_t k = 0; k < v.size(); ++k) expected[k] = v[k] * 2;
    check_close(x, expected);
    v = values(x);
    x.sub_(y, 0.5);
    for (size_t k = 0; k < v.size(); ++k) expected[k] = v[k] - 0.5 * w[k % 4];
    check_close(x, expected, Tol{tol_for(dtype).rtol * 2, 1e-5});
    v = values(x);
    x /= y;
    for (size_t k = 0; k < v.size(); ++k) expected[k] = v[k] / w[k % 4];
    check_close(x, expected);
    v = values(x);
    x.pow_(2);
    for (size_t k = 0; k < v.size(); ++k) expected[k] = v[k] * v[k];
    check_close(x, expected);
    v = values(x);
    version = x.version();
    x.sqrt_();
    CHECK(x.version() > version);
    for (size_t k = 0; k < v.size(); ++k) expected[k] = std::sqrt(v[k]);
    check_close(x, expected);
    CHECK(x.data_ptr() == ptr);
  }
}

TEST_CASE("unary in-place ops") {
  struct Case {
    const char* name;
    std::function<void(Tensor&)> op;
    UnaryRef ref;
  };
  std::vector<Case> cases = {
      {"neg_", [](Tensor& t) { t.neg_(); }, [](double v) { return -v; }},
      {"exp_", [](Tensor& t) { t.exp_(); }, [](double v) { return std::exp(v); }},
      {"log_", [](Tensor& t) { t.abs_().log_(); }, [](double v) { return std::log(std::fabs(v)); }},
      {"abs_", [](Tensor& t) { t.abs_(); }, [](double v) { return std::fabs(v); }},
      {"tanh_", [](Tensor& t) { t.tanh_(); }, [](double v) { return std::tanh(v); }},
      {"sigmoid_", [](Tensor& t) { t.sigmoid_(); }, sigmoid_ref},
      {"relu_", [](Tensor& t) { t.relu_(); }, [](double v) { return v > 0 ? v : 0; }},
      {"clamp_", [](Tensor& t) { t.clamp_(-1, 1.5); }, [](double v) { return std::min(std::max(v, -1.0), 1.5); }},
      {"masked_fill_", [](Tensor& t) { t.masked_fill_(t.gt(1), 9); }, [](double v) { return v > 1 ? 9 : v; }},
  };
  for (const Case& c : cases) {
    for (DType dtype : kFloatTypes) {
      std::string name = c.name;
      CAPTURE(name);
      CAPTURE(dtype);
      // A non-contiguous self: the transposed view of a [6, 5] tensor.
      Tensor base = make(spread(30, -3, 3), {6, 5}, dtype);
      Tensor x = base.t();
      std::vector<double> v = values(x), expected;
      for (double e : v) expected.push_back(c.ref(e));
      uint64_t version = base.version();
      c.op(x);
      CHECK(base.version() > version);
      check_close(x, expected);
      check_close(base.t(), expected);
    }
  }
  // relu_ and neg_ keep integer dtypes.
  Tensor i = make({-2, 3}, kInt32);
  i.relu_();
  check_close(i, {0, 3});
  i.neg_();
  check_close(i, {0, -3});
  i.clamp_(-1, 5);
  check_close(i, {0, -1});
}

TEST_CASE("in-place type rules") {
  Tensor i = make({1, 2}, kInt64);
  // A float result cannot be written into an integer tensor (PyTorch: "result type Float can't
  // be cast to the desired output type Long").
  CHECK_THROWS_WITH_AS(i.add_(make({0.5, 1}, kFloat32)), doctest::Contains("can't be cast"), Error);
  CHECK_THROWS_WITH_AS(i.add_(0.5), doctest::Contains("add_: result type float32 can't be cast to the desired output type int64"), Error);
  CHECK_THROWS_WITH_AS(i.div_(2), doctest::Contains("div_"), Error);
  CHECK_THROWS_WITH_AS(i.exp_(), doctest::Contains("exp_"), Error);
  CHECK_THROWS_WITH_AS(i.clamp_(0.5), doctest::Contains("clamp_"), Error);
  CHECK_THROWS_WITH_AS(make({1, 0}, kBool).mul_(make({2, 3}, kInt32)), doctest::Contains("bool"), Error);
  check_close(i, {1, 2});  // unchanged by the failed ops
  // A wider result of the same category is converted back: int32 += int64 tensor.
  Tensor j = make({1, 2}, kInt32);
  j.add_(make({10, 20}, kInt64));
  CHECK(j.dtype() == kInt32);
  check_close(j, {11, 22});
  // float32 self with a float64 tensor: computed in float64, written back as float32.
  Tensor f = make({1, 2}, kFloat32);
  uint64_t version = f.version();
  f.mul_(make({0.1, 0.2}, kFloat64));
  CHECK(f.dtype() == kFloat32);
  CHECK(f.version() > version);
  check_close(f, {0.1, 0.4});
  // float16 self with a float32 tensor
  Tensor h = make({1, 2}, kFloat16);
  h += make({0.5, 0.25}, kFloat32);
  CHECK(h.dtype() == kFloat16);
  check_close(h, {1.5, 2.25});
  // Integer self with integer scalars stays integral; masked_fill_ converts the value.
  Tensor k = make({7, 9}, kInt32);
  k -= 2;
  k *= 3;
  check_close(k, {15, 21});
  k.masked_fill_(make({1, 0}, kBool), 2.9);
  check_close(k, {2, 21});
  k.pow_(2);
  check_close(k, {4, 441});
}

TEST_CASE("in-place shape rules and aliasing") {
  Tensor x = make({1, 2, 3}, kFloat32);
  // other may broadcast to self, but not self to a bigger shape
  CHECK_THROWS_WITH_AS(x.add_(make({1, 2, 3, 4, 5, 6}, {2, 3}, kFloat32)), doctest::Contains("[2, 3]"), Error);
  CHECK_THROWS_WITH_AS(x.mul_(make({1, 2}, kFloat32)), doctest::Contains("mul"), Error);
  CHECK_THROWS_WITH_AS(x.masked_fill_(make({1, 0, 1, 0, 1, 0}, {2, 3}, kBool), 0),
                       doctest::Contains("masked_fill_"), Error);
  // writing into an expanded tensor is refused
  Tensor ex = make({1}, kFloat32).expand({3});
  CHECK_THROWS_WITH_AS(ex.add_(1), doctest::Contains("clone"), Error);
  // self as both operands
  Tensor y = make({1, 2, 3}, kFloat32);
  y.add_(y);
  check_close(y, {2, 4, 6});
  y.mul_(y);
  check_close(y, {4, 16, 36});
  // an operand that overlaps self at other positions is read before it is overwritten
  Tensor z = make({1, 2, 3, 4, 5}, kFloat32);
  Tensor tail = z.narrow(0, 1, 4), head = z.narrow(0, 0, 4);
  tail.add_(head);
  check_close(z, {1, 3, 5, 7, 9});
  Tensor w = make({1, 2, 3}, kFloat32);
  w.sub_(w[0]);
  check_close(w, {0, 1, 2});
}

// ---- allclose / equal -------------------------------------------------------------------------------

TEST_CASE("allclose and equal") {
  Tensor a = make({1, 2, 3}, kFloat32);
  CHECK(allclose(a, make({1, 2, 3.00001}, kFloat64)));
  CHECK_FALSE(allclose(a, make({1, 2, 3.001}, kFloat64)));
  CHECK(allclose(a, make({1, 2, 3.001}, kFloat64), 1e-3));
  CHECK(allclose(a, make({1.1, 2.1, 3.1}, kFloat32), 0, 0.11));
  CHECK(allclose(make({kInf, -kInf}, kFloat32), make({kInf, -kInf}, kFloat32)));
  CHECK_FALSE(allclose(make({kInf}, kFloat32), make({-kInf}, kFloat32)));
  CHECK_FALSE(allclose(make({1}, kFloat32), make({kInf}, kFloat32)));
  CHECK_FALSE(allclose(make({kNaN}, kFloat32), make({kNaN}, kFloat32)));
  CHECK(allclose(make({kNaN}, kFloat32), make({kNaN}, kFloat32), 1e-5, 1e-8, true));
  CHECK(allclose(make({2, 2}, {2, 1}, kFloat32), make({2}, kFloat32)));  // broadcasts
  CHECK_THROWS_WITH_AS(allclose(a, make({1, 2}, kFloat32)), doctest::Contains("allclose"), Error);
  CHECK(equal(a, make({1, 2, 3}, kFloat32)));
  CHECK(equal(a, make({1, 2, 3}, kInt64)));
  CHECK(equal(make(spread(6, 0, 5), {2, 3}, kFloat64).t(), make(spread(6, 0, 5), {2, 3}, kFloat64).t().contiguous()));
  CHECK_FALSE(equal(a, make({1, 2, 4}, kFloat32)));
  CHECK_FALSE(equal(a, make({1, 2, 3}, {3, 1}, kFloat32)));
  CHECK_FALSE(equal(make({kNaN}, kFloat32), make({kNaN}, kFloat32)));
}

// ---- errors -----------------------------------------------------------------------------------------

TEST_CASE("errors name the op and the shapes") {
  Tensor a = make(spread(6, 0, 1), {2, 3}, kFloat32), b = make(spread(4, 0, 1), {4}, kFloat32);
  CHECK_THROWS_WITH_AS(a + b, doctest::Contains("add"), Error);
  CHECK_THROWS_WITH_AS(a + b, doctest::Contains("[2, 3]"), Error);
  CHECK_THROWS_WITH_AS(a + b, doctest::Contains("[4]"), Error);
  CHECK_THROWS_WITH_AS(a * b, doctest::Contains("mul"), Error);
  CHECK_THROWS_WITH_AS(lt(a, b), doctest::Contains("lt"), Error);
  CHECK_THROWS_WITH_AS(a.add_(b), doctest::Contains("add_"), Error);
  CHECK_THROWS_WITH_AS(add(a, Tensor()), doctest::Contains("add"), Error);
  CHECK_THROWS_WITH_AS(exp(Tensor()), doctest::Contains("exp"), Error);
}

TEST_CASE("run-time vector ISA: LOOM_CPU_ISA caps the choice; a bad value is reported and ignored") {
  using cpu::VectorIsa;
  std::ostringstream warnings;
  CHECK(cpu::vector_isa_from_setting(nullptr, VectorIsa::Avx2, warnings) == VectorIsa::Avx2);
  CHECK(cpu::vector_isa_from_setting("", VectorIsa::Avx2, warnings) == VectorIsa::Avx2);
  CHECK(cpu::vector_isa_from_setting("baseline", VectorIsa::Avx2, warnings) == VectorIsa::Baseline);
  CHECK(cpu::vector_isa_from_setting("avx2", VectorIsa::Avx2, warnings) == VectorIsa::Avx2);
  CHECK(cpu::vector_isa_from_setting("avx2", VectorIsa::Baseline, warnings) ==
        VectorIsa::Baseline);  // never more than the CPU has
  CHECK(cpu::vector_isa_from_setting("avx512", VectorIsa::Avx2, warnings) == VectorIsa::Avx2);
  CHECK(cpu::vector_isa_from_setting("avx512", VectorIsa::Avx512, warnings) == VectorIsa::Avx512);
  CHECK(cpu::vector_isa_from_setting("avx2", VectorIsa::Avx512, warnings) == VectorIsa::Avx2);
  CHECK(warnings.str().empty());
  CHECK(cpu::vector_isa_from_setting("sse4", VectorIsa::Avx512, warnings) == VectorIsa::Avx512);
  CHECK(warnings.str() ==
        "loom: LOOM_CPU_ISA='sse4' is none of baseline, avx2 and avx512; ignored, using avx512\n");
}

TEST_CASE("run-time vector ISA: the description names the code that runs") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
    const VectorIsa in_use = cpu::set_vector_isa(isa);
    CHECK(cpu::vector_isa_description() == std::string(cpu::vector_isa_name(in_use)) + " (run-time)");
  }
#else
  // Without dispatch the compiler's target decides, whatever set_vector_isa was given.
  cpu::set_vector_isa(VectorIsa::Baseline);
  const std::string description = cpu::vector_isa_description();
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__)
  CHECK(description == "avx512 (compiled)");
#elif defined(__AVX2__)
  CHECK(description == "avx2 (compiled)");
#else
  CHECK(description == "baseline (compiled)");
#endif
#endif
  cpu::set_vector_isa(saved);
}

TEST_CASE("run-time vector ISA: the Eigen loops' AVX2 and AVX-512 copies are chosen, and all match float64") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
  std::string copies = "the build's own";
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  // A portable build must hand out the copy of array_kernels.cpp for the best ISA the CPU has, up
  // to the one asked for.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  cpu::set_vector_isa(VectorIsa::Avx2);
  CHECK((&cpu::array_kernels<float>() == &cpu::avx2::array_kernels_table<float>()) == avx2);
  CHECK((&cpu::array_kernels<double>() == &cpu::avx2::array_kernels_table<double>()) == avx2);
  cpu::set_vector_isa(VectorIsa::Avx512);
  CHECK((&cpu::array_kernels<float>() == &cpu::avx512::array_kernels_table<float>()) == avx512);
  CHECK((&cpu::array_kernels<double>() == &cpu::avx512::array_kernels_table<double>()) == avx512);
  if (avx2) copies = avx512 ? "baseline, AVX2 and AVX-512" : "baseline and AVX2";
#endif
  cpu::set_vector_isa(VectorIsa::Baseline);
  CHECK(&cpu::array_kernels<float>() == &cpu::compiled::array_kernels_table<float>());
  MESSAGE((std::string("Eigen loops compared in ") + copies + " code"));

  manual_seed(5);
  // Odd sizes, for the vector loops' remainders; layer_norm rows of 771 (not a multiple of 8).
  Tensor x = randn({40001}).mul(3), positive = x.abs().add(1e-3), g = randn({40001});
  Tensor rows = randn({33, 771}).mul(2).add(0.5), w = randn({771}), b = randn({771}), gy = randn({33, 771});
  auto run = [&](const Tensor& xs, const Tensor& pos, const Tensor& gs, const Tensor& r, const Tensor& wt,
                 const Tensor& bs, const Tensor& gys) {
    auto [ln, mean, rstd] = layer_norm_forward(r, {771}, wt, bs, 1e-5);
    auto [gx, gw, gb] = layer_norm_backward(gys, r, {771}, mean, rstd, wt);
    auto [gx_plain, gw_plain, gb_plain] = layer_norm_backward(gys, r, {771}, mean, rstd, Tensor());
    return std::vector<Tensor>{exp(xs),
                               log(pos),
                               log1p(pos),
                               sqrt(pos),
                               rsqrt(pos),
                               sin(xs),
                               cos(xs),
                               tanh(xs),
                               sigmoid(xs),
                               silu(xs),
                               gelu(xs),
                               gelu(xs, "tanh"),
                               gelu_backward(gs, xs),
                               gelu_backward(gs, xs, "tanh"),
                               ln,
                               layer_norm(r, {771}),
                               gx,
                               gw,
                               gb,
                               gx_plain};
  };
  const std::vector<Tensor> reference =
      run(x.to(kFloat64), positive.to(kFloat64), g.to(kFloat64), rows.to(kFloat64), w.to(kFloat64),
          b.to(kFloat64), gy.to(kFloat64));
  for (VectorIsa isa : {VectorIsa::Baseline, VectorIsa::Avx2, VectorIsa::Avx512}) {
    cpu::set_vector_isa(isa);
    const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa());
    CAPTURE(isa_name);
    const std::vector<Tensor> got = run(x, positive, g, rows, w, b, gy);
    for (size_t i = 0; i < got.size(); ++i) {
      CAPTURE(i);
      // Eigen's float functions are within a few ulp (3.2e-7 relative at most). The tanh GELU's gradient (i =
      // 13) multiplies 1 - t^2, t = tanh(...) near +-1, by up to ~8 (PyTorch's formula too), so the error of
      // Eigen's float tanh shows: 8.4e-6 absolute in AVX2 code, 1.4e-5 in SSE2 code. The layer norm's
      // gradients add 33-771 terms: 2.9e-6.
      CHECK(allclose(got[i].to(kFloat64), reference[i], 2e-6, i == 13 ? 2e-5 : 4e-6));
    }
  }
  cpu::set_vector_isa(saved);
}

TEST_CASE("run-time vector ISA: AVX2 and AVX-512 loops give the baseline loops' results") {
  using cpu::VectorIsa;
  const VectorIsa saved = cpu::vector_isa();
#ifdef LOOM_VECTOR_DISPATCH_ACTIVE
  // A portable build on an AVX2 CPU dispatches; anything else runs the baseline loops again.
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  CHECK(cpu::set_vector_isa(VectorIsa::Avx2) == (avx2 ? VectorIsa::Avx2 : VectorIsa::Baseline));
#endif
  manual_seed(3);
  // Odd sizes: the vector loops' remainders; large enough for two chunks on two threads.
  Tensor a = randn({70001}), b = randn({70001}), m = randn({37, 1029}).mul(8);
  Tensor x64 = m.to(kFloat64);
  auto run = [&] {
    return std::vector<Tensor>{add(a, b),
                               mul(a, b.narrow(0, 0, 1).expand({70001})),
                               relu(a),
                               clamp(a, -0.5, 0.5),
                               softmax(m, -1),
                               log_softmax(m, -1),
                               a.to(kBFloat16).to(kFloat32),
                               m.sum({1}),
                               m.sum({0}),
                               a.sum(),
                               m.var({1})};
  };
  // One SGD (momentum, weight decay) and one AdamW step from the same state.
  auto steps = [&] {
    Tensor p = a.clone(), q = a.clone(), buffer = b.clone(), exp_avg = b.mul(0.1), exp_avg_sq = b.abs();
    fused_sgd_({p}, {b}, {buffer}, SgdStepOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01});
    fused_adam_(
        {q}, {b}, {exp_avg}, {exp_avg_sq}, {}, {3},
        AdamStepOptions{
            .lr = 0.01, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .decoupled = true});
    return std::vector<Tensor>{p, buffer, q, exp_avg, exp_avg_sq};
  };
  cpu::set_vector_isa(VectorIsa::Baseline);
  const std::vector<Tensor> baseline = run(), baseline_steps = steps();
  for (VectorIsa isa : {VectorIsa::Avx2, VectorIsa::Avx512}) {
    cpu::set_vector_isa(isa);
    const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa());
    CAPTURE(isa_name);
    const std::vector<Tensor> vectorised = run(), vectorised_steps = steps();
    // Adds, products, selects and casts are exact in any ISA; the exp differs by rounding only.
    // The sums and the variance add in the same order in any ISA (fixed lanes): equal bit for bit.
    for (size_t i : {0, 1, 2, 3, 6, 7, 8, 9, 10}) {
      CAPTURE(i);
      CHECK(equal(baseline[i], vectorised[i]));
    }
    // The optimizer steps may fuse a * b + c into one rounding (FMA) in AVX2 code.
    for (size_t i = 0; i < baseline_steps.size(); ++i) {
      CAPTURE(i);
      CHECK(allclose(baseline_steps[i], vectorised_steps[i], 1e-6, 1e-7));
    }
    // And the sums are right: against float64.
    CHECK(allclose(vectorised[7].to(kFloat64), x64.sum({1}), 1e-6, 1e-4));
    CHECK(allclose(vectorised[8].to(kFloat64), x64.sum({0}), 1e-6, 1e-4));
    CHECK(allclose(baseline[4], vectorised[4], 1e-6, 1e-7));
    // log_softmax is x - logsumexp: the sum's rounding shows as an absolute error of the row's
    // scale (|x| up to ~30 here) times float's epsilon.
    CHECK(allclose(baseline[5], vectorised[5], 0, 3e-5));
    CHECK(allclose(vectorised[5].to(kFloat64), log_softmax(x64, -1), 0, 3e-5));
    // And both are right: softmax against float64.
    CHECK(allclose(vectorised[4].to(kFloat64), softmax(x64, -1), 1e-6, 1e-8));
    CHECK(allclose(baseline[4].to(kFloat64), softmax(x64, -1), 1e-6, 1e-8));
  }
  cpu::set_vector_isa(saved);
}
