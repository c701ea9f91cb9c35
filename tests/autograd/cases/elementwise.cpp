/*
 * Gradcheck cases of the elementwise ops, all first and second order (second-order gradients
 * of elementwise ops are required). Every unary op on a contiguous input, on a transpose and
 * on a view; every binary op with broadcast operands, a transposed operand, a number operand
 * on either side, a 0-dim operand and in place on a non-leaf; where and masked_fill (recorded
 * as where); clamp with each bound; gelu with both approximations.
 * Inputs keep away from points without a derivative (abs, relu, sign at 0; clamp at its
 * bounds) and from the edges of a domain (log, sqrt, rsqrt at 0; pow's base <= 0).
 */
#include <cmath>

#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {

enum class Domain {
  kAny,           // N(0, 1)
  kPositive,      // [0.5, ~1.5]: log, sqrt, rsqrt, pow's base, divisors
  kAwayFromZero,  // both signs, |x| >= 0.25: abs, relu, sign, silu's and gelu's both sides
};

std::vector<double> values_in(Domain domain, int64_t n, uint64_t seed) {
  std::vector<double> v = random_values(n, seed);
  for (double& x : v) {
    if (domain == Domain::kPositive) x = std::abs(x) * 0.3 + 0.5;
    if (domain == Domain::kAwayFromZero) x += std::copysign(0.25, x);
  }
  return v;
}

// A contiguous float64 leaf with values in `domain`.
Tensor leaf_in(Domain domain, IntArrayRef shape, uint64_t seed) {
  return make(values_in(domain, shape_numel(shape), seed), shape).requires_grad_();
}

// A non-contiguous [rows, cols] leaf (the transpose of a [cols, rows] tensor) in `domain`.
Tensor transposed_in(Domain domain, int64_t rows, int64_t cols, uint64_t seed) {
  return make(values_in(domain, rows * cols, seed), {cols, rows}).t().requires_grad_();
}

Tensor scalar_leaf(double v) { return scalar_tensor(v, TensorOptions(kFloat64)).requires_grad_(); }

// Operands equal at elements 0 and 2.
Tensor tied_a() { return make({0.5, -1.0, 2.0, 0.25}, {4}).requires_grad_(); }
Tensor tied_b() { return make({0.5, 1.0, 2.0, -3.0}, {4}).requires_grad_(); }

Tensor bool_mask(const std::vector<double>& v, IntArrayRef shape) { return make(v, shape).ne(0); }

using Unary = Tensor (*)(const Tensor&);

// Three cases per unary op: [2, 3] (second order), a transpose, and a strided view of a leaf.
void add_unary(std::vector<GradcheckCase>& cases, Op op, const std::string& name, Unary f, Domain domain,
               uint64_t seed) {
  cases.push_back({op, name + " [2, 3]", [=] { return inputs(leaf_in(domain, {2, 3}, seed)); },
                   [=](const Inputs& x) { return outputs(f(x[0])); }, kSecondOrder});
  cases.push_back({op, name + " of a transpose",
                   [=] { return inputs(transposed_in(domain, 3, 4, seed + 1)); },
                   [=](const Inputs& x) { return outputs(f(x[0])); }, kSecondOrder});
  cases.push_back({op, name + " of a strided column view",
                   [=] { return inputs(leaf_in(domain, {3, 4}, seed + 2)); },
                   [=](const Inputs& x) { return outputs(f(x[0].narrow(1, 1, 2))); }, kSecondOrder});
}

std::vector<GradcheckCase> unary_cases() {
  std::vector<GradcheckCase> c;
  add_unary(c, Op::neg, "neg", [](const Tensor& x) { return x.neg(); }, Domain::kAny, 1000);
  add_unary(c, Op::exp, "exp", [](const Tensor& x) { return x.exp(); }, Domain::kAny, 1010);
  add_unary(c, Op::log, "log", [](const Tensor& x) { return x.log(); }, Domain::kPositive, 1020);
  add_unary(c, Op::log1p, "log1p", [](const Tensor& x) { return log1p(x); }, Domain::kPositive, 1030);
  add_unary(c, Op::sqrt, "sqrt", [](const Tensor& x) { return x.sqrt(); }, Domain::kPositive, 1040);
  add_unary(c, Op::rsqrt, "rsqrt", [](const Tensor& x) { return x.rsqrt(); }, Domain::kPositive, 1050);
  add_unary(c, Op::abs, "abs", [](const Tensor& x) { return x.abs(); }, Domain::kAwayFromZero, 1060);
  add_unary(c, Op::sign, "sign (times x, so that the output is in the graph)",
            [](const Tensor& x) { return x.sign() + x; }, Domain::kAwayFromZero, 1070);
  add_unary(c, Op::sin, "sin", [](const Tensor& x) { return x.sin(); }, Domain::kAny, 1080);
  add_unary(c, Op::cos, "cos", [](const Tensor& x) { return x.cos(); }, Domain::kAny, 1090);
  add_unary(c, Op::tanh, "tanh", [](const Tensor& x) { return x.tanh(); }, Domain::kAny, 1100);
  add_unary(c, Op::sigmoid, "sigmoid", [](const Tensor& x) { return x.sigmoid(); }, Domain::kAny, 1110);
  add_unary(c, Op::relu, "relu (times x: relu'' is 0)", [](const Tensor& x) { return x.relu() * x; },
            Domain::kAwayFromZero, 1120);
  add_unary(c, Op::silu, "silu", [](const Tensor& x) { return x.silu(); }, Domain::kAwayFromZero, 1130);
  add_unary(c, Op::gelu, "gelu (erf)", [](const Tensor& x) { return x.gelu(); }, Domain::kAwayFromZero, 1140);
  add_unary(c, Op::gelu, "gelu (tanh)", [](const Tensor& x) { return x.gelu("tanh"); }, Domain::kAwayFromZero,
            1150);
  // gelu_backward is differentiated when a second derivative goes through gelu.
  for (const char* approximate : {"none", "tanh"}) {
    c.push_back({Op::gelu_backward, std::string("gelu_backward (") + approximate + ")",
                 [] { return inputs(leaf_in(Domain::kAny, {2, 3}, 1190), leaf_in(Domain::kAwayFromZero, {2, 3}, 1191)); },
                 [=](const Inputs& x) { return outputs(gelu_backward(x[0], x[1], approximate)); }, kSecondOrder});
  }
  // threshold_backward is relu's gradient, differentiated by a second derivative through relu.
  // self away from the threshold: the mask must not flip under the finite differences.
  c.push_back(
      {Op::threshold_backward, "threshold_backward (at 0)",
       [] {
         return inputs(leaf_in(Domain::kAny, {2, 3}, 1192), leaf_in(Domain::kAwayFromZero, {2, 3}, 1193));
       },
       [](const Inputs& x) { return outputs(threshold_backward(x[0], x[1], 0.0)); }, kSecondOrder});
  add_unary(c, Op::clamp, "clamp min only", [](const Tensor& x) { return x.clamp(-0.3) * x; },
            Domain::kAwayFromZero, 1160);
  add_unary(c, Op::clamp, "clamp max only", [](const Tensor& x) { return x.clamp({}, 0.4) * x; },
            Domain::kAwayFromZero, 1170);
  add_unary(c, Op::clamp, "clamp both bounds", [](const Tensor& x) { return x.clamp(-0.35, 0.45) * x; },
            Domain::kAwayFromZero, 1180);
  return c;
}

[[maybe_unused]] static const bool unary_registered = [] {
  for (GradcheckCase& c : unary_cases()) gradcheck_cases().push_back(std::move(c));
  return true;
}();

// Sizes that broadcast to [3, 4].
constexpr int64_t kRows = 3, kCols = 4;

[[maybe_unused]] static RegisterCases binary_cases{{
    // ---- add / sub ------------------------------------------------------------------------------
    {Op::add, "add broadcast [3, 1] + [4]",
     [] { return inputs(leaf({kRows, 1}, 2001), leaf({kCols}, 2002)); },
     [](const Inputs& x) { return outputs((x[0] + x[1]) * x[0]); }, kSecondOrder},
    {Op::add, "add transpose + [4] with alpha",
     [] { return inputs(transposed_leaf(kRows, kCols, 2003), leaf({kCols}, 2004)); },
     [](const Inputs& x) { return outputs(x[0].add(x[1], 2.5)); }, kSecondOrder},
    {Op::add, "add a number, and a number plus a tensor", [] { return inputs(leaf({2, 3}, 2005)); },
     [](const Inputs& x) { return outputs((x[0] + 1.5) * (2.0 + x[0])); }, kSecondOrder},
    {Op::add, "add a 0-dim leaf to [2, 3]", [] { return inputs(leaf({2, 3}, 2006), scalar_leaf(0.7)); },
     [](const Inputs& x) { return outputs(x[0] + x[1]); }, kSecondOrder},
    {Op::add, "add_ broadcast into a non-leaf",
     [] { return inputs(leaf({kRows, kCols}, 2007), leaf({kCols}, 2008)); },
     [](const Inputs& x) {
       Tensor a = x[0] * x[0];
       a.add_(x[1]);
       return outputs(a);
     }, kSecondOrder},
    {Op::sub, "sub broadcast [3, 1] - [4]",
     [] { return inputs(leaf({kRows, 1}, 2011), leaf({kCols}, 2012)); },
     [](const Inputs& x) { return outputs((x[0] - x[1]) * x[1]); }, kSecondOrder},
    {Op::sub, "sub [4] - transpose with alpha",
     [] { return inputs(leaf({kCols}, 2013), transposed_leaf(kRows, kCols, 2014)); },
     [](const Inputs& x) { return outputs(x[0].sub(x[1], 0.5)); }, kSecondOrder},
    {Op::sub, "sub a number, and a tensor from a number", [] { return inputs(leaf({2, 3}, 2015)); },
     [](const Inputs& x) { return outputs((x[0] - 1.5) * (2.0 - x[0])); }, kSecondOrder},
    {Op::sub, "sub a 0-dim leaf from [2, 3]", [] { return inputs(scalar_leaf(-0.4), leaf({2, 3}, 2016)); },
     [](const Inputs& x) { return outputs(x[0] - x[1]); }, kSecondOrder},
    {Op::sub, "sub_ broadcast in a non-leaf",
     [] { return inputs(leaf({kRows, kCols}, 2017), leaf({kRows, 1}, 2018)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 2.0;
       a -= x[1] * x[1];
       return outputs(a);
     }, kSecondOrder},

    // ---- mul / div ------------------------------------------------------------------------------
    {Op::mul, "mul broadcast [3, 1] * [4]",
     [] { return inputs(leaf({kRows, 1}, 2021), leaf({kCols}, 2022)); },
     [](const Inputs& x) { return outputs(x[0] * x[1]); }, kSecondOrder},
    {Op::mul, "mul transpose * [3, 1]",
     [] { return inputs(transposed_leaf(kRows, kCols, 2023), leaf({kRows, 1}, 2024)); },
     [](const Inputs& x) { return outputs(x[0] * x[1] * x[0]); }, kSecondOrder},
    {Op::mul, "mul by a number on either side", [] { return inputs(leaf({2, 3}, 2025)); },
     [](const Inputs& x) { return outputs((x[0] * 1.5) * (-2.0 * x[0])); }, kSecondOrder},
    {Op::mul, "mul by a 0-dim leaf", [] { return inputs(leaf({2, 3}, 2026), scalar_leaf(1.3)); },
     [](const Inputs& x) { return outputs(x[1] * x[0]); }, kSecondOrder},
    {Op::mul, "mul_ of a non-leaf by a broadcast tensor (saves a clone of self)",
     [] { return inputs(leaf({kRows, kCols}, 2027), leaf({kCols}, 2028)); },
     [](const Inputs& x) {
       Tensor a = x[0].sin();
       a *= x[1];
       return outputs(a);
     }, kSecondOrder},
    {Op::mul, "mul_ through a view of a non-leaf",
     [] { return inputs(leaf({kRows, kCols}, 2029), leaf({kRows, 1}, 2030)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a.narrow(1, 1, 2).mul_(x[1]);
       return outputs(a);
     }, kSecondOrder},
    {Op::div, "div broadcast [3, 1] / [4]",
     [] { return inputs(leaf({kRows, 1}, 2031), leaf_in(Domain::kPositive, {kCols}, 2032)); },
     [](const Inputs& x) { return outputs(x[0] / x[1]); }, kSecondOrder},
    {Op::div, "div transpose / [3, 1]",
     [] { return inputs(transposed_leaf(kRows, kCols, 2033), leaf_in(Domain::kPositive, {kRows, 1}, 2034)); },
     [](const Inputs& x) { return outputs(x[0] / x[1]); }, kSecondOrder},
    {Op::div, "div by a number, and a number by a tensor",
     [] { return inputs(leaf_in(Domain::kPositive, {2, 3}, 2035)); },
     [](const Inputs& x) { return outputs((x[0] / 4.0) + (1.5 / x[0])); }, kSecondOrder},
    {Op::div, "div by a 0-dim leaf", [] { return inputs(leaf({2, 3}, 2036), scalar_leaf(0.8)); },
     [](const Inputs& x) { return outputs(x[0] / x[1]); }, kSecondOrder},
    {Op::div, "div_ of a non-leaf (saves a clone of self)",
     [] { return inputs(leaf({kRows, kCols}, 2037), leaf_in(Domain::kPositive, {kCols}, 2038)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a /= x[1];
       return outputs(a);
     }, kSecondOrder},

    // ---- pow ------------------------------------------------------------------------------------
    {Op::pow, "pow tensor ^ tensor, broadcast [3, 1] ^ [4]",
     [] { return inputs(leaf_in(Domain::kPositive, {kRows, 1}, 2041), leaf({kCols}, 2042)); },
     [](const Inputs& x) { return outputs(x[0].pow(x[1])); }, kSecondOrder},
    {Op::pow, "pow transpose ^ tensor",
     [] { return inputs(transposed_in(Domain::kPositive, kRows, kCols, 2043), leaf({kRows, 1}, 2044)); },
     [](const Inputs& x) { return outputs(x[0].pow(x[1])); }, kSecondOrder},
    {Op::pow, "pow tensor ^ number (2.5, 3 and -1.5)",
     [] { return inputs(leaf_in(Domain::kPositive, {2, 3}, 2045)); },
     [](const Inputs& x) { return outputs(x[0].pow(2.5), x[0].pow(3), x[0].pow(-1.5)); }, kSecondOrder},
    {Op::pow, "pow of a negative base to an integer number", [] { return inputs(leaf({2, 3}, 2046)); },
     [](const Inputs& x) { return outputs(x[0].pow(3), x[0].pow(2.0)); }, kSecondOrder},
    {Op::pow, "pow number ^ tensor", [] { return inputs(leaf({2, 3}, 2047)); },
     [](const Inputs& x) { return outputs(pow(2.0, x[0]), pow(0.5, x[0])); }, kSecondOrder},
    {Op::pow, "pow tensor ^ 0-dim leaf",
     [] { return inputs(leaf_in(Domain::kPositive, {2, 3}, 2048), scalar_leaf(1.7)); },
     [](const Inputs& x) { return outputs(x[0].pow(x[1])); }, kSecondOrder},
    {Op::pow, "pow_ of a non-leaf by a number",
     [] { return inputs(leaf_in(Domain::kPositive, {2, 3}, 2049)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a.pow_(1.5);
       return outputs(a);
     }, kSecondOrder},

    // ---- maximum / minimum ----------------------------------------------------------------------
    // Random values have no ties; the tie case checks the even split (the central difference
    // at a tie is 1/2 for each operand too).
    {Op::maximum, "maximum broadcast [3, 1] and [4]",
     [] { return inputs(leaf({kRows, 1}, 2051), leaf({kCols}, 2052)); },
     [](const Inputs& x) { return outputs(maximum(x[0], x[1]) * x[0]); }, kSecondOrder},
    {Op::maximum, "maximum transpose and 0-dim leaf",
     [] { return inputs(transposed_leaf(kRows, kCols, 2053), scalar_leaf(0.1)); },
     [](const Inputs& x) { return outputs(maximum(x[0], x[1])); }, kSecondOrder},
    {Op::maximum, "maximum with ties splits the gradient evenly",
     [] { return inputs(tied_a(), tied_b()); },
     [](const Inputs& x) { return outputs(maximum(x[0], x[1])); }},
    {Op::minimum, "minimum broadcast [3, 1] and [4]",
     [] { return inputs(leaf({kRows, 1}, 2054), leaf({kCols}, 2055)); },
     [](const Inputs& x) { return outputs(minimum(x[0], x[1]) * x[1]); }, kSecondOrder},
    {Op::minimum, "minimum [4] and transpose",
     [] { return inputs(leaf({kCols}, 2056), transposed_leaf(kRows, kCols, 2057)); },
     [](const Inputs& x) { return outputs(minimum(x[0], x[1])); }, kSecondOrder},
    {Op::minimum, "minimum with ties splits the gradient evenly",
     [] { return inputs(tied_a(), tied_b()); },
     [](const Inputs& x) { return outputs(minimum(x[0], x[1])); }},

    // ---- where / masked_fill --------------------------------------------------------------------
    {Op::where, "where broadcast: cond [3, 4], a [3, 1], b [4]",
     [] { return inputs(leaf({kRows, 1}, 2061), leaf({kCols}, 2062)); },
     [](const Inputs& x) {
       Tensor cond = bool_mask({1, 0, 0, 1, 0, 1, 1, 0, 1, 1, 0, 0}, {kRows, kCols});
       return outputs(where(cond, x[0], x[1]) * x[0]);
     }, kSecondOrder},
    {Op::where, "where of a transpose and a number, and a number and a transpose",
     [] { return inputs(transposed_leaf(kRows, kCols, 2063)); },
     [](const Inputs& x) {
       Tensor cond = bool_mask({0, 1, 1, 0}, {kCols});
       return outputs(where(cond, x[0], 0.5), where(cond, -1.5, x[0] * x[0]));
     }, kSecondOrder},
    {Op::where, "where with a 0-dim leaf", [] { return inputs(leaf({2, 3}, 2064), scalar_leaf(0.3)); },
     [](const Inputs& x) {
       Tensor cond = bool_mask({1, 0, 1, 0, 0, 1}, {2, 3});
       return outputs(where(cond, x[1], x[0]));
     }, kSecondOrder},
    {Op::where, "masked_fill (recorded as where) with a broadcast mask",
     [] { return inputs(leaf({kRows, kCols}, 2065)); },
     [](const Inputs& x) { return outputs(x[0].masked_fill(bool_mask({1, 0, 0, 1}, {kCols}), 2.0) * x[0]); },
     kSecondOrder},
    {Op::where, "masked_fill of a transpose", [] { return inputs(transposed_leaf(kRows, kCols, 2066)); },
     [](const Inputs& x) { return outputs(x[0].masked_fill(bool_mask({0, 1, 1}, {kRows, 1}), -1.0)); },
     kSecondOrder},
    {Op::where, "masked_fill_ on a non-leaf", [] { return inputs(leaf({kRows, kCols}, 2067)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 2.0;
       a.masked_fill_(bool_mask({1, 0, 1, 0}, {kCols}), 0.0);
       return outputs(a * x[0]);
     }, kSecondOrder},
}};

// In-place unary ops on non-leaves: those whose formula saves the input compute from a clone.
[[maybe_unused]] static RegisterCases inplace_unary_cases{{
    {Op::exp, "exp_ of a non-leaf (saves its output)", [] { return inputs(leaf({2, 3}, 2101)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 0.5;
       a.exp_();
       return outputs(a);
     }, kSecondOrder},
    {Op::log, "log_ of a non-leaf (saves a clone of its input)",
     [] { return inputs(leaf_in(Domain::kPositive, {2, 3}, 2102)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 2.0;
       a.log_();
       return outputs(a);
     }, kSecondOrder},
    {Op::relu, "relu_ through a view of a non-leaf",
     [] { return inputs(leaf_in(Domain::kAwayFromZero, {3, 4}, 2103)); },
     [](const Inputs& x) {
       Tensor a = x[0] * x[0] - 1.0;
       a.narrow(0, 1, 2).relu_();
       return outputs(a);
     }, kSecondOrder},
    {Op::clamp, "clamp_ of a non-leaf", [] { return inputs(leaf_in(Domain::kAwayFromZero, {2, 3}, 2104)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a.clamp_(-0.5, 0.6);
       return outputs(a * x[0]);
     }, kSecondOrder},
    {Op::abs, "abs_ of a non-leaf (saves a clone of its input)",
     [] { return inputs(leaf_in(Domain::kAwayFromZero, {2, 3}, 2105)); },
     [](const Inputs& x) {
       Tensor a = x[0] * 1.0;
       a.abs_();
       return outputs(a * x[0]);
     }, kSecondOrder},
}};

}  // namespace

}  // namespace loom::test
