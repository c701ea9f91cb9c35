/*
 * CUDA elementwise ops against the CPU: every unary and binary op, comparisons, logical ops,
 * where, clamp, gelu and its backward, arange and the random fills, for every dtype the CPU
 * kernels take. Inputs come contiguous (the vectorised kernel), transposed, step-sliced and
 * misaligned (the strided kernel), broadcast ([3,1] with [1,4], Scalars, 0-dim tensors) and
 * in place; gradients are compared for the differentiable ops. The random fills must equal the
 * CPU's element for element after the same manual_seed.
 */
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/random.h"
#include "tests/cuda/ops/cuda_test_util.h"

namespace loom {
namespace {

using test::check_cuda_matches_cpu;
using test::CudaCase;
using test::cuda_float_dtypes;
using test::make;
using test::pat;
using test::label;
using test::Tol;

LOOM_CUDA_COVERS(Op::neg, Op::exp, Op::log, Op::log1p, Op::sqrt, Op::rsqrt, Op::abs, Op::sign, Op::sin,
                 Op::cos, Op::tanh, Op::sigmoid, Op::relu, Op::silu, Op::logical_not, Op::gelu,
                 Op::gelu_backward, Op::threshold_backward, Op::clamp, Op::add, Op::sub, Op::mul, Op::div,
                 Op::pow, Op::maximum, Op::minimum, Op::eq, Op::ne, Op::lt, Op::le, Op::gt, Op::ge,
                 Op::logical_and, Op::logical_or, Op::where, Op::arange, Op::uniform, Op::normal, Op::randint,
                 Op::bernoulli);

const std::vector<DType> kAllDtypes = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64, kBool};
const std::vector<DType> kIntDtypes = {kInt8, kUInt8, kInt32, kInt64};

CudaCase with_backward(bool backward) {
  CudaCase c;
  c.backward = backward;
  return c;
}

// Values of dtype dt: floats in (-scale, scale), integers in -2..2 (uint8 wraps), bool mixed.
Tensor values(IntArrayRef shape, DType dt, double seed, double scale = 1.0) {
  if (dt == kBool) return gt(pat(shape, seed), 0.1);
  if (is_floating(dt)) return pat(shape, seed, scale).to(dt);
  return pat(shape, seed, 2.9).to(dt);
}

// Positive floats in [0.25, 1.25), for log, sqrt, pow bases.
Tensor positive(IntArrayRef shape, DType dt, double seed) { return (pat(shape, seed).abs() + 0.25).to(dt); }

// A view applied inside the compared function (so CPU and CUDA see the same strides), turning
// a base tensor into a [4, 6] tensor.
struct Layout {
  std::string name;
  std::vector<int64_t> base;
  std::function<Tensor(const Tensor&)> view;
};

const std::vector<Layout>& layouts() {
  static const std::vector<Layout> l = {
      {"contiguous", {4, 6}, [](const Tensor& x) { return x; }},
      {"transposed", {6, 4}, [](const Tensor& x) { return x.t(); }},
      {"step-sliced", {8, 7}, [](const Tensor& x) { return x.slice(0, 0, 8, 2).slice(1, 1, 7); }},
      // Contiguous but one element off the 16-byte alignment: the strided kernel.
      {"misaligned", {25}, [](const Tensor& x) { return x.slice(0, 1, 25).view({4, 6}); }},
  };
  return l;
}

// ---- unary -----------------------------------------------------------------------------------

struct UnaryCase {
  std::string name;
  std::function<Tensor(const Tensor&)> f;
  bool positive_only = false;
};

const std::vector<UnaryCase>& floating_unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }},
      {"exp", [](const Tensor& x) { return exp(x); }},
      {"log", [](const Tensor& x) { return log(x); }, true},
      {"log1p", [](const Tensor& x) { return log1p(x); }},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, true},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, true},
      {"abs", [](const Tensor& x) { return abs(x); }},
      {"sign", [](const Tensor& x) { return sign(x); }},
      {"sin", [](const Tensor& x) { return sin(x); }},
      {"cos", [](const Tensor& x) { return cos(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"gelu", [](const Tensor& x) { return gelu(x); }},
      {"gelu tanh", [](const Tensor& x) { return gelu(x, "tanh"); }},
  };
  return cases;
}

TEST_CASE("elementwise: floating unary ops, forward and backward, every layout") {
  LOOM_REQUIRE_GPU();
  for (const UnaryCase& c : floating_unary_cases())
    for (DType dt : cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        CAPTURE(c.name);
        CAPTURE(dt);
        CAPTURE(l.name);
        Tensor x = c.positive_only ? positive(l.base, dt, 0.7) : values(l.base, dt, 0.7, 2.0);
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.f(l.view(in[0])); }, {x});
      }
}

TEST_CASE("elementwise: unary ops on special values (NaN, infinities, signed zeros)") {
  LOOM_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> v = {nan, inf, -inf, 0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, 100.0, -100.0, 0.5};
  for (const UnaryCase& c : floating_unary_cases())
    for (DType dt : cuda_float_dtypes()) {
      CAPTURE(c.name);
      CAPTURE(dt);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.f(in[0]); }, {make(v, {12}, dt)},
                             with_backward(false));
    }
}

TEST_CASE("elementwise: integer and bool unary ops") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kIntDtypes)
    for (const Layout& l : layouts()) {
      CAPTURE(dt);
      CAPTURE(l.name);
      const Tensor x = values(l.base, dt, 0.3);
      for (auto f : {neg, abs, sign, relu, logical_not})
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return f(l.view(in[0])); }, {x});
    }
  // Extremes: abs and neg of the most negative value wrap, as on the CPU.
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return std::vector<Tensor>{abs(in[0]), neg(in[0])}; },
                         {make({-128, 127, 0, -1}, {4}, kInt8)});
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return logical_not(in[0]); }, {values({5, 3}, dt, 0.9)});
  }
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return sign(in[0]); }, {values({5, 3}, kBool, 0.9)});
}

TEST_CASE("elementwise: unary ops promote integer inputs to float32") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kInt32, kBool})
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return std::vector<Tensor>{exp(in[0]), sigmoid(in[0])}; },
                           {values({3, 5}, dt, 0.2)});
}

TEST_CASE("elementwise: vectorised kernel with a tail, and the 32-bit strided kernel on a large tensor") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16, kFloat64})
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) { return std::vector<Tensor>{gelu(in[0]), mul(in[0], in[0]), gt(in[0], 0.2)}; },
        {values({1031}, dt, 0.1)});
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return tanh(in[0].t()); }, {values({40, 33}, kFloat32, 0.1)});
}

TEST_CASE("elementwise: 4-d permuted, sliced and broadcast operands (no dims coalesce)") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kBFloat16, kInt64}) {
    CAPTURE(dt);
    // a: [2,3,4,5] permuted to [5,3,2,4]; b: [5,1,2,1] broadcast; c: a step-slice of [5,6,2,4].
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          Tensor a = in[0].permute({3, 1, 0, 2}), c = in[2].slice(1, 0, 6, 2);
          return std::vector<Tensor>{add(a, in[1]), mul(sub(a, c), in[1]), where(gt(a, c), a, in[1])};
        },
        {values({2, 3, 4, 5}, dt, 0.1), values({5, 1, 2, 1}, dt, 0.7), values({5, 6, 2, 4}, dt, 1.3)});
  }
}

// ---- gelu_backward -----------------------------------------------------------------------------

TEST_CASE("elementwise: gelu_backward, both approximations") {
  LOOM_REQUIRE_GPU();
  for (const char* approximate : {"none", "tanh"})
    for (DType dt : cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        CAPTURE(approximate);
        CAPTURE(dt);
        CAPTURE(l.name);
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) { return gelu_backward(in[0], l.view(in[1]), approximate); },
            {values({4, 6}, dt, 0.4), values(l.base, dt, 0.9, 3.0)}, with_backward(false));
      }
}

// ---- threshold_backward (relu's gradient) -----------------------------------------------------

TEST_CASE("elementwise: threshold_backward, with the threshold rounded to the dtype") {
  LOOM_REQUIRE_GPU();
  for (double threshold : {0.0, 0.3})
    for (DType dt : cuda_float_dtypes())
      for (const Layout& l : layouts()) {
        CAPTURE(threshold);
        CAPTURE(dt);
        CAPTURE(l.name);
        check_cuda_matches_cpu(
            [&](const std::vector<Tensor>& in) {
              return threshold_backward(in[0], l.view(in[1]), threshold);
            },
            {values({4, 6}, dt, 0.4), values(l.base, dt, 0.9)}, with_backward(false));
      }
}

// ---- binary --------------------------------------------------------------------------------

struct BinaryCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Tensor&)> f;
  std::function<Tensor(const Tensor&, Scalar)> fs;  // with a Scalar second operand
  bool differentiable;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); },
       [](const Tensor& a, Scalar b) { return add(a, b); }, true},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); },
       [](const Tensor& a, Scalar b) { return sub(a, b); }, true},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); },
       [](const Tensor& a, Scalar b) { return mul(a, b); }, true},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); },
       [](const Tensor& a, Scalar b) { return div(a, b); }, true},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, nullptr, true},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, nullptr, true},
      {"eq", [](const Tensor& a, const Tensor& b) { return eq(a, b); },
       [](const Tensor& a, Scalar b) { return eq(a, b); }, false},
      {"ne", [](const Tensor& a, const Tensor& b) { return ne(a, b); },
       [](const Tensor& a, Scalar b) { return ne(a, b); }, false},
      {"lt", [](const Tensor& a, const Tensor& b) { return lt(a, b); },
       [](const Tensor& a, Scalar b) { return lt(a, b); }, false},
      {"le", [](const Tensor& a, const Tensor& b) { return le(a, b); },
       [](const Tensor& a, Scalar b) { return le(a, b); }, false},
      {"gt", [](const Tensor& a, const Tensor& b) { return gt(a, b); },
       [](const Tensor& a, Scalar b) { return gt(a, b); }, false},
      {"ge", [](const Tensor& a, const Tensor& b) { return ge(a, b); },
       [](const Tensor& a, Scalar b) { return ge(a, b); }, false},
      {"logical_and", [](const Tensor& a, const Tensor& b) { return logical_and(a, b); }, nullptr, false},
      {"logical_or", [](const Tensor& a, const Tensor& b) { return logical_or(a, b); }, nullptr, false},
  };
  return cases;
}

bool supports(const BinaryCase& c, DType dt) { return !(dt == kBool && c.name == "sub"); }

TEST_CASE("elementwise: binary ops, every dtype and layout, forward and backward") {
  LOOM_REQUIRE_GPU();
  for (const BinaryCase& c : binary_cases())
    for (DType dt : kAllDtypes) {
      if (!supports(c, dt)) continue;
      for (const Layout& l : layouts()) {
        CAPTURE(c.name);
        CAPTURE(dt);
        CAPTURE(l.name);
        // Integer and bool values repeat, so the comparisons see ties.
        Tensor a = values(l.base, dt, 0.2), b = values({4, 6}, dt, 1.3);
        if (c.name == "div" && !is_floating(dt) && dt != kBool) b = add(b.abs(), 1).to(dt);  // no division by zero
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.f(l.view(in[0]), in[1]); }, {a, b},
                               with_backward(c.differentiable));
      }
    }
}

TEST_CASE("elementwise: binary ops broadcast [3,1] with [1,4], with Scalars and 0-dim tensors") {
  LOOM_REQUIRE_GPU();
  for (const BinaryCase& c : binary_cases())
    for (DType dt : kAllDtypes) {
      if (!supports(c, dt)) continue;
      CAPTURE(c.name);
      CAPTURE(dt);
      const CudaCase cc = with_backward(c.differentiable);
      Tensor b = values({1, 4}, dt, 1.9);
      if (c.name == "div" && !is_floating(dt) && dt != kBool) b = add(b.abs(), 1).to(dt);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.f(in[0], in[1]); },
                             {values({3, 1}, dt, 0.5), b}, cc);
      // A 0-dim tensor operand on either side.
      check_cuda_matches_cpu(
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{c.f(in[0], in[1]), c.f(in[1], in[0])}; },
          {values({3, 5}, dt, 0.5), add(values({}, dt, 1.1), dt == kBool ? 1 : 2).to(dt)}, cc);
      if (c.fs && dt != kBool) {
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.fs(in[0], Scalar(2)); },
                               {values({3, 5}, dt, 0.5)}, cc);
        if (is_floating(dt))
          check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.fs(in[0], Scalar(-0.75)); },
                                 {values({3, 5}, dt, 0.5)}, cc);
      }
    }
}

TEST_CASE("elementwise: maximum, minimum and comparisons with NaN and infinities") {
  LOOM_REQUIRE_GPU();
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> a = {nan, 1.0, nan, inf, -inf, 0.0, -0.0, 2.0};
  const std::vector<double> b = {1.0, nan, nan, 1.0, -1.0, -0.0, 0.0, 2.0};
  for (DType dt : cuda_float_dtypes())
    for (const BinaryCase& c : binary_cases()) {
      if (c.name == "div" || c.name == "add" || c.name == "sub" || c.name == "mul") continue;
      CAPTURE(c.name);
      CAPTURE(dt);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return c.f(in[0], in[1]); },
                             {make(a, {8}, dt), make(b, {8}, dt)}, with_backward(false));
    }
}

TEST_CASE("elementwise: pow, floating and integer, tensor and scalar exponents") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    CAPTURE(dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0].t(), in[1]); },
                           {positive({6, 4}, dt, 0.3), values({4, 6}, dt, 0.8, 2.0)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); },
                           {positive({3, 1}, dt, 0.3), values({1, 4}, dt, 0.8, 2.0)});
    // The shortcut exponents, and one without a shortcut.
    for (double e : {2.0, 3.0, 1.0, -1.0, -2.0, 0.5, -0.5, 1.7}) {
      CAPTURE(e);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return pow(in[0], e); }, {positive({4, 6}, dt, 0.1)});
    }
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(2.5, in[0]); }, {values({4, 6}, dt, 0.1)});
    // Negative bases and zero: NaN for fractional exponents, infinities for negative ones.
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{pow(in[0], 0.5), pow(in[0], -1.0), pow(in[0], 1.7), pow(in[0], in[0])};
        },
        {make({-2.0, -0.0, 0.0, 3.0}, {4}, dt)}, with_backward(false));
  }
  for (DType dt : kIntDtypes) {
    CAPTURE(dt);
    // Bases -2..2 and exponents 0..9 (wrapping past the type's range), then negative exponents.
    Tensor base = values({4, 6}, dt, 0.3), expo = pat({4, 6}, 0.6, 4.5).abs().to(dt);
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); }, {base, add(expo, expo)});
    check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0], 3); }, {base});
    if (dt != kUInt8)
      check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0], in[1]); },
                             {make({1, -1, -1, 2, -2, 0, 3}, {7}, dt), make({-1, -1, -2, -1, -3, 2, 5}, {7}, dt)});
  }
  check_cuda_matches_cpu([](const std::vector<Tensor>& in) { return pow(in[0], 40); },
                         {make({3, -3, 2, 7}, {4}, kInt64)});
}

TEST_CASE("elementwise: in-place ops on CUDA tensors, including a transposed self") {
  LOOM_REQUIRE_GPU();
  for (DType dt : {kFloat32, kFloat16, kInt32}) {
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          Tensor x = in[0].clone();
          x.add_(in[1]);
          x.mul_(2);
          Tensor y = in[0].clone();
          Tensor yt = y.t();
          yt.add_(in[2]);  // writes through a transposed view
          return std::vector<Tensor>{x, y};
        },
        {values({4, 6}, dt, 0.1), values({1, 6}, dt, 0.2), values({6, 4}, dt, 0.3)}, with_backward(false));
  }
  check_cuda_matches_cpu(
      [](const std::vector<Tensor>& in) {
        Tensor x = in[0].clone();
        x.t().clamp_(-0.3, 0.4);
        return x;
      },
      {values({4, 6}, kFloat32, 0.1)}, with_backward(false));
}

// ---- where and clamp --------------------------------------------------------------------------

TEST_CASE("elementwise: where, every dtype, broadcast and strided") {
  LOOM_REQUIRE_GPU();
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    const Tensor cond = gt(pat({4, 6}, 0.5), 0.0);
    for (const Layout& l : layouts()) {
      CAPTURE(l.name);
      check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return where(in[0], l.view(in[1]), in[2]); },
                             {cond, values(l.base, dt, 0.2), values({4, 6}, dt, 0.9)});
    }
    // cond [3,1], a [1,4], b a Scalar (masked_fill) and the other way round.
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{where(in[0], in[1], in[2]), where(in[0], in[1], 1), where(in[0], 0, in[2])};
        },
        {gt(pat({3, 1}, 0.1), 0.0), values({1, 4}, dt, 0.2), values({3, 4}, dt, 0.7)});
  }
}

TEST_CASE("elementwise: clamp with min, max, both, crossed and NaN bounds") {
  LOOM_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  using Bounds = std::pair<std::optional<Scalar>, std::optional<Scalar>>;
  const std::vector<Bounds> bounds = {{Scalar(-0.5), Scalar(0.25)}, {Scalar(-0.5), std::nullopt},
                                      {std::nullopt, Scalar(0.25)}, {Scalar(0.5), Scalar(-0.5)}};
  for (DType dt : cuda_float_dtypes()) {
    for (const Layout& l : layouts())
      for (const auto& [lo, hi] : bounds) {
        CAPTURE(dt);
        CAPTURE(l.name);
        check_cuda_matches_cpu([&](const std::vector<Tensor>& in) { return clamp(l.view(in[0]), lo, hi); },
                               {values(l.base, dt, 0.4)});
      }
    CAPTURE(dt);
    const Tensor special = make({nan, -1.0, 0.1, 2.0}, {4}, dt);
    check_cuda_matches_cpu(
        [&](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{clamp(in[0], -0.5, 0.5), clamp(in[0], Scalar(nan), 1.0), clamp(in[0], {}, Scalar(nan))};
        },
        {special}, with_backward(false));
  }
  for (DType dt : kIntDtypes) {
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{clamp(in[0].t(), -1, 1), clamp(in[0], 0), clamp(in[0], {}, 1), clamp(in[0], 2, -2)};
        },
        {values({6, 4}, dt, 0.4)});
  }
}

// ---- arange and random fills ---------------------------------------------------------------

TEST_CASE("elementwise: arange on every numeric dtype") {
  LOOM_REQUIRE_GPU();
  const Tensor device_of = zeros({1});
  for (DType dt : kAllDtypes) {
    if (dt == kBool) continue;
    CAPTURE(dt);
    check_cuda_matches_cpu(
        [dt](const std::vector<Tensor>& in) {
          const auto options = TensorOptions(dt).device(in[0].device());
          std::vector<Tensor> out{arange(0, 100, 3, options), arange(50, -10, -7, options)};
          if (is_floating(dt)) out.push_back(arange(-1.5, 2.5, 0.1, options));
          return out;
        },
        {device_of}, with_backward(false));
  }
}

// Runs fill(options) on the CPU and on CUDA after the same seed; the results must be equal
// within `tol` (exact unless given).
void check_random(const std::function<Tensor(TensorOptions)>& fill, DType dt, Tol tol = {0, 0}) {
  manual_seed(1234);
  const Tensor cpu = fill(TensorOptions(dt));
  manual_seed(1234);
  const Tensor gpu = fill(TensorOptions(dt).device(Device::cuda()));
  CHECK(gpu.is_cuda());
  test::check_same(gpu, cpu, tol, "random fill");
}

TEST_CASE("elementwise: random fills equal the CPU's for the same seed") {
  LOOM_REQUIRE_GPU();
  for (DType dt : cuda_float_dtypes()) {
    CAPTURE(dt);
    // Two fills in a row: the second starts at the advanced offset; an odd size leaves a
    // partial last counter; a strided target goes through a temporary.
    check_random(
        [](TensorOptions o) {
          Tensor a = rand({1001}, o), b = rand({7, 5}, o);
          Tensor c = empty({6, 5}, o);
          uniform_(c.t(), -2.0, 3.0);
          return cat({a, b.reshape({-1}), c.reshape({-1})}, 0);
        },
        dt);
    // Box-Muller goes through log, sqrt, sin and cos in double: bit-equal in the emulator, and
    // within an ulp of double on a GPU (whose libdevice may round differently), which rounds
    // to the same float in all but ~1 in 2^29 cases.
    const Tol normal_tol = dt == kFloat64 ? Tol{1e-14, 1e-14} : Tol{0, 0};
    check_random([](TensorOptions o) { return cat({randn({1003}, o), normal_(empty({9}, o), 2.0, 0.5)}, 0); }, dt,
                 normal_tol);
  }
  for (DType dt : kAllDtypes) {
    CAPTURE(dt);
    check_random([](TensorOptions o) { return bernoulli_(empty({1001}, o), 0.3); }, dt);
    if (dt != kBool)
      check_random([](TensorOptions o) { return randint(-7, 9, {999}, o); }, dt);
  }
}

// ---- CPU scalars -------------------------------------------------------------------------------

TEST_CASE("elementwise: a 0-dim CPU tensor joins CUDA tensors as in PyTorch, gradients included") {
  LOOM_REQUIRE_GPU();
  const Device gpu = Device::cuda();
  using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<std::pair<std::string, Binary>> ops = {
      {"mul", [](const Tensor& x, const Tensor& s) { return x * s; }},
      {"sub, scalar first", [](const Tensor& x, const Tensor& s) { return s - x; }},
      {"div", [](const Tensor& x, const Tensor& s) { return x / s; }},
      {"pow", [](const Tensor& x, const Tensor& s) { return pow(x.abs() + 0.5, s); }},
      {"maximum", [](const Tensor& x, const Tensor& s) { return maximum(x, s); }},
      {"where", [](const Tensor& x, const Tensor& s) { return where(gt(x, 0), s, x); }},
  };
  for (DType scalar_dtype : {kFloat64, kFloat32, kInt64}) {
    for (const auto& [name, op] : ops) {
      INFO(label(name, "scalar", scalar_dtype));
      const bool floating = is_floating(scalar_dtype);
      Tensor x_cpu = values({3, 4}, kFloat32, 0.2).requires_grad_();
      Tensor x_gpu = x_cpu.detach().to(gpu).requires_grad_();
      Tensor s_cpu = scalar_tensor(floating ? 1.75 : 2.0, scalar_dtype), s_kept = s_cpu.clone();
      if (floating) {
        s_cpu.requires_grad_();
        s_kept.requires_grad_();
      }
      Tensor want = op(x_cpu, s_cpu), got = op(x_gpu, s_kept);
      CHECK(got.is_cuda());
      CHECK(got.dtype() == want.dtype());  // float32: the 0-dim operand does not promote a float tensor
      test::check_same(got, want, test::cuda_tol_for(want.dtype()), "forward");
      const Tensor w = values({3, 4}, kFloat32, 0.7);
      (want * w).sum().backward();
      (got * w.to(gpu)).sum().backward();
      test::check_same(x_gpu.grad(), x_cpu.grad(), test::cuda_tol_for(kFloat32), "the CUDA tensor's gradient");
      if (floating) {
        REQUIRE(s_kept.grad().defined());
        CHECK(s_kept.grad().is_cpu());  // a leaf's gradient lives on its device
        CHECK(s_kept.grad().item<double>() == doctest::Approx(s_cpu.grad().item<double>()).epsilon(1e-5));
      }
    }
  }
  // In place into a CUDA tensor, an int tensor with a float64 scalar (promotes, as in PyTorch),
  // and a CPU condition for where.
  Tensor y = ones({3}, gpu);
  y.add_(scalar_tensor(2.5, kFloat64));
  CHECK(y.to(kCPU).to_vector<double>() == std::vector<double>{3.5, 3.5, 3.5});
  Tensor ints = arange(0, 3, 1, TensorOptions(kInt32).device(gpu)) * scalar_tensor(0.5, kFloat64);
  CHECK(ints.dtype() == kFloat64);
  CHECK(ints.to(kCPU).to_vector<double>() == std::vector<double>{0, 0.5, 1});
  CHECK(where(scalar_tensor(false, kBool), y, 7.0).to(kCPU).to_vector<double>() == std::vector<double>{7, 7, 7});
  // Only 0-dim CPU tensors: a one-element [1] tensor, or an op writing into the CPU scalar, is refused.
  CHECK_THROWS_WITH_AS(y * ones({1}), doctest::Contains("mul: expected all tensors on the same device"), Error);
  Tensor host = scalar_tensor(1.0);
  CHECK_THROWS_WITH_AS(host.mul_(ones({}, gpu)), doctest::Contains("mul_: cannot write a result on cuda:0"), Error);
}

// ---- bad input -------------------------------------------------------------------------------

TEST_CASE("elementwise: bad inputs throw with a message naming the op") {
  LOOM_REQUIRE_GPU();
  const Tensor i = values({4}, kInt32, 0.1).to(Device::cuda());
  const Tensor b = values({4}, kBool, 0.1).to(Device::cuda());
  // Checks of the CUDA kernels themselves (the ops layer normally promotes first).
  CHECK_THROWS_WITH_AS(get_kernel<Op::exp>(Device::cuda())(empty({4}, i.options()), i),
                       doctest::Contains("exp: expected a floating-point tensor"), Error);
  CHECK_THROWS_WITH_AS(get_kernel<Op::neg>(Device::cuda())(empty({4}, b.options()), b),
                       doctest::Contains("neg: not supported for bool tensors"), Error);
  CHECK_THROWS_WITH_AS(get_kernel<Op::where>(Device::cuda())(empty({4}, i.options()), i, i, i),
                       doctest::Contains("where: expected a bool condition"), Error);
  // And through the public API.
  CHECK_THROWS_WITH_AS(sub(b, b), doctest::Contains("sub"), Error);
}

}  // namespace
}  // namespace loom
