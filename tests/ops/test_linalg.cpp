/*
 * matmul / mm / bmm / linear against float64 reference loops written here. Inputs are drawn from
 * a grid of multiples of 1/8 in [-1, 1]: exact in bf16, so every product and every partial sum
 * is exact in f32 and the oneDNN result must match the reference up to the final rounding,
 * whatever order the library sums in.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <random>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;

namespace {

// Values k/8, k in [-8, 8], from a seeded generator; made as float64 then converted.
Tensor grid(IntArrayRef sizes, DType dtype, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<double> v(static_cast<size_t>(shape_numel(sizes)));
  for (double& x : v) x = dist(gen) / 8.0;
  Tensor t = from_blob(v.data(), sizes, TensorOptions(kFloat64)).clone();
  return t.to(dtype);
}

// Shape first, then values with the dtype's tolerance (tests/test_util.h).
void check_close(const Tensor& actual, const std::vector<double>& expected, IntArrayRef shape) {
  REQUIRE(actual.sizes() == shape);
  test::check_close(actual, expected, test::tol_for(actual.dtype()));
}

// Reference batched product over explicit batch shapes: a [*ba, M, K], b [*bb, K, N] -> [*batch, M, N].
std::vector<double> ref_matmul(const Tensor& a3, const Tensor& b3) {
  // a3/b3 already expanded to the same batch and made 3-D [B, M, K] / [B, K, N] in float64.
  std::vector<double> a = a3.to_vector<double>(), b = b3.to_vector<double>();
  const int64_t B = a3.size(0), M = a3.size(1), K = a3.size(2), N = b3.size(2);
  std::vector<double> c(static_cast<size_t>(B * M * N), 0.0);
  for (int64_t z = 0; z < B; ++z)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += a[(z * M + i) * K + k] * b[(z * K + k) * N + j];
        c[(z * M + i) * N + j] = s;
      }
  return c;
}

std::vector<double> ref_mm(const Tensor& a, const Tensor& b) {
  return ref_matmul(a.unsqueeze(0), b.unsqueeze(0));
}

}  // namespace

TEST_CASE("mm: f32 against a float64 loop, several shapes") {
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 4, 5}, {17, 33, 9}, {64, 128, 96}, {130, 257, 67}};
  for (auto& s : shapes) {
    CAPTURE(s[0]);
    CAPTURE(s[1]);
    CAPTURE(s[2]);
    Tensor a = grid({s[0], s[1]}, kFloat32, 1), b = grid({s[1], s[2]}, kFloat32, 2);
    check_close(mm(a, b), ref_mm(a, b), {s[0], s[2]});
    check_close(a.mm(b), ref_mm(a, b), {s[0], s[2]});
  }
}

TEST_CASE("matmul: transposed, sliced and expanded operands") {
  Tensor a = grid({40, 24}, kFloat32, 3), b = grid({50, 40}, kFloat32, 4);
  // a^T [24, 40] (column-major view), b^T [40, 50]
  Tensor at = a.t(), bt = b.t();
  CHECK_FALSE(at.is_contiguous());
  check_close(matmul(at, bt), ref_mm(at.contiguous(), bt.contiguous()), {24, 50});
  // Every other column: no unit stride anywhere (copied internally).
  Tensor wide = grid({24, 80}, kFloat32, 5);
  Tensor sliced = wide.slice(1, 0, 80, 2);  // [24, 40], strides (80, 2)
  check_close(matmul(sliced, bt), ref_mm(sliced.contiguous(), bt.contiguous()), {24, 50});
  // A row vector expanded to a matrix (stride 0 rows).
  Tensor row = grid({1, 40}, kFloat32, 6).expand({7, 40});
  check_close(matmul(row, bt), ref_mm(row.contiguous(), bt.contiguous()), {7, 50});
}

TEST_CASE("matmul: 1-D and 2-D combinations follow torch.matmul") {
  Tensor v = grid({6}, kFloat32, 7), w = grid({6}, kFloat32, 8), m = grid({6, 4}, kFloat32, 9),
         m2 = grid({5, 6}, kFloat32, 10);
  double dot = 0;
  auto vv = v.to_vector<double>(), wv = w.to_vector<double>();
  for (size_t i = 0; i < 6; ++i) dot += vv[i] * wv[i];
  Tensor d = matmul(v, w);
  CHECK(d.dim() == 0);
  check_close(d, {dot}, {});
  check_close(matmul(v, m), ref_mm(v.unsqueeze(0), m), {4});    // [6] x [6, 4] -> [4]
  check_close(matmul(m2, v), ref_mm(m2, v.unsqueeze(1)), {5});  // [5, 6] x [6] -> [5]
  // N-D x 1-D and 1-D x N-D
  Tensor t = grid({2, 3, 5, 6}, kFloat32, 11);
  check_close(matmul(t, v), ref_mm(t.reshape({30, 6}), v.unsqueeze(1)), {2, 3, 5});
  Tensor u = grid({3, 6, 4}, kFloat32, 12);
  check_close(matmul(v, u), ref_matmul(v.unsqueeze(0).unsqueeze(0).expand({3, 1, 6}).contiguous(), u),
              {3, 4});
}

TEST_CASE("matmul: batch broadcasting [2,1,3,4] x [5,4,2] -> [2,5,3,2]") {
  Tensor a = grid({2, 1, 3, 4}, kFloat32, 13), b = grid({5, 4, 2}, kFloat32, 14);
  Tensor out = matmul(a, b);
  Tensor a3 = a.expand({2, 5, 3, 4}).contiguous().reshape({10, 3, 4});
  Tensor b3 = b.expand({2, 5, 4, 2}).contiguous().reshape({10, 4, 2});
  check_close(out, ref_matmul(a3, b3), {2, 5, 3, 2});
  // [B, M, K] x [K, N] folds the batch into the rows; [M, K] x [B, K, N] broadcasts a.
  Tensor x = grid({4, 3, 8}, kFloat32, 15), w = grid({8, 5}, kFloat32, 16);
  check_close(matmul(x, w), ref_mm(x.reshape({12, 8}), w), {4, 3, 5});
  Tensor y = grid({3, 8}, kFloat32, 17), z = grid({4, 8, 5}, kFloat32, 18);
  check_close(matmul(y, z), ref_matmul(y.expand({4, 3, 8}).contiguous(), z), {4, 3, 5});
  // A transposed batch: x.transpose(1, 2) is [4, 8, 3] with non-mergeable strides.
  Tensor xt = x.transpose(1, 2);
  Tensor q = grid({4, 3, 6}, kFloat32, 19);
  check_close(matmul(xt, q), ref_matmul(xt.contiguous(), q), {4, 8, 6});
  // Permuted batch dims that do not merge into one stride.
  Tensor p = grid({3, 2, 5, 4}, kFloat32, 20).permute({1, 0, 2, 3});  // [2, 3, 5, 4]
  Tensor r = grid({2, 3, 4, 6}, kFloat32, 21);
  check_close(matmul(p, r), ref_matmul(p.contiguous().reshape({6, 5, 4}), r.reshape({6, 4, 6})),
              {2, 3, 5, 6});
  // A batch interleaved with the rows: batch stride 3 < row stride 15.
  Tensor inter = grid({4, 5, 3}, kFloat32, 42).permute({1, 0, 2});  // [5, 4, 3]
  Tensor wi = grid({3, 6}, kFloat32, 43);
  check_close(matmul(inter, wi),
              ref_matmul(inter.contiguous(), wi.unsqueeze(0).expand({5, 3, 6}).contiguous()), {5, 4, 6});
  check_close(bmm(inter, grid({5, 3, 2}, kFloat32, 44)),
              ref_matmul(inter.contiguous(), grid({5, 3, 2}, kFloat32, 44)), {5, 4, 2});
  // Matrix-vector products in every orientation.
  Tensor mv = grid({15, 7}, kFloat32, 45), vec = grid({7}, kFloat32, 46);
  check_close(matmul(mv, vec), ref_mm(mv, vec.unsqueeze(1)), {15});
  check_close(matmul(vec, mv.t()), ref_mm(vec.unsqueeze(0), mv.t().contiguous()), {15});
  check_close(matmul(mv.t().contiguous().t(), vec), ref_mm(mv, vec.unsqueeze(1)), {15});
}

TEST_CASE("bmm: batches, strides and the Tensor method") {
  Tensor a = grid({3, 7, 5}, kFloat32, 22), b = grid({3, 6, 5}, kFloat32, 23).transpose(1, 2);  // [3, 5, 6]
  check_close(bmm(a, b), ref_matmul(a, b.contiguous()), {3, 7, 6});
  check_close(a.bmm(b), ref_matmul(a, b.contiguous()), {3, 7, 6});
  check_close(a.matmul(b), ref_matmul(a, b.contiguous()), {3, 7, 6});
}

TEST_CASE("matmul: bf16, f16, f64 and integer dtypes") {
  for (DType t : {kBFloat16, kFloat16, kFloat64}) {
    CAPTURE(t);
    Tensor a = grid({2, 19, 33}, t, 24), b = grid({33, 21}, t, 25);
    Tensor out = matmul(a, b);
    CHECK(out.dtype() == t);
    check_close(out, ref_mm(a.reshape({38, 33}), b), {2, 19, 21});
    Tensor c = grid({2, 21, 33}, t, 26);
    check_close(matmul(a, c.transpose(1, 2)), ref_matmul(a, c.transpose(1, 2).contiguous()), {2, 19, 21});
  }
  // bf16 with values that are not exact: the bf16 tolerance still holds against the f64 loop.
  Tensor a = randn({16, 64}).to(kBFloat16), b = randn({64, 8}).to(kBFloat16);
  Tensor out = mm(a, b);
  std::vector<double> ref = ref_mm(a, b), got = out.to_vector<double>();
  double scale = 0;
  for (double r : ref) scale = std::max(scale, std::abs(r));
  for (size_t i = 0; i < ref.size(); ++i) CHECK(std::abs(got[i] - ref[i]) <= 1.6e-2 * scale);
  for (DType t : {kInt32, kInt64, kInt8}) {
    CAPTURE(t);
    std::vector<int64_t> av(12), bv(12);
    for (int i = 0; i < 12; ++i) {
      av[i] = i - 5;
      bv[i] = 3 - i;
    }
    Tensor ai = from_blob(av.data(), {3, 4}, TensorOptions(kInt64)).to(t);
    Tensor bi = from_blob(bv.data(), {4, 3}, TensorOptions(kInt64)).to(t);
    Tensor out_i = matmul(ai, bi);
    CHECK(out_i.dtype() == t);
    std::vector<int64_t> got_i = out_i.to_vector<int64_t>();
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) {
        int64_t s = 0;
        for (int k = 0; k < 4; ++k) s += av[i * 4 + k] * bv[k * 3 + j];
        CHECK(got_i[i * 3 + j] == s);
      }
  }
}

TEST_CASE("matmul: hand-computed values") {
  double av[] = {1, 2, 3, 4, 5, 6}, bv[] = {7, 8, 9, 10, 11, 12};
  Tensor a = from_blob(av, {2, 3}, TensorOptions(kFloat64)).to(kFloat32);
  Tensor b = from_blob(bv, {3, 2}, TensorOptions(kFloat64)).to(kFloat32);
  check_close(mm(a, b), {58, 64, 139, 154}, {2, 2});
}

TEST_CASE("matmul: empty dims") {
  Tensor a = grid({3, 0}, kFloat32, 27), b = grid({0, 4}, kFloat32, 28);
  Tensor out = mm(a, b);  // K = 0: zeros
  check_close(out, std::vector<double>(12, 0.0), {3, 4});
  CHECK(matmul(grid({0, 5}, kFloat32, 29), grid({5, 2}, kFloat32, 30)).sizes() == IntArrayRef{0, 2});
  Tensor l = linear(grid({2, 0}, kFloat64, 31), grid({3, 0}, kFloat64, 32), grid({3}, kFloat64, 33));
  auto bias = grid({3}, kFloat64, 33).to_vector<double>();
  check_close(l, {bias[0], bias[1], bias[2], bias[0], bias[1], bias[2]}, {2, 3});
}

TEST_CASE("linear: x W^T + b, with and without bias, N-D input") {
  for (DType t : {kFloat32, kBFloat16, kFloat64, kFloat16}) {
    CAPTURE(t);
    Tensor x = grid({2, 3, 10}, t, 34), w = grid({7, 10}, t, 35), bias = grid({7}, t, 36);
    std::vector<double> ref = ref_mm(x.reshape({6, 10}), w.t().contiguous());
    check_close(linear(x, w), ref, {2, 3, 7});
    auto bv = bias.to_vector<double>();
    for (size_t i = 0; i < ref.size(); ++i) ref[i] += bv[i % 7];
    check_close(linear(x, w, bias), ref, {2, 3, 7});
  }
  // Non-contiguous input and weight, 1-D input.
  Tensor x = grid({10, 6}, kFloat32, 37).t();  // [6, 10]
  Tensor w = grid({10, 7}, kFloat32, 38).t();  // [7, 10], column-major
  check_close(linear(x, w), ref_mm(x.contiguous(), w.t().contiguous()), {6, 7});
  Tensor v = grid({10}, kFloat32, 39);
  check_close(linear(v, w), ref_mm(v.unsqueeze(0), w.t().contiguous()), {7});
}

TEST_CASE("matmul family: bad inputs throw loom::Error naming the op and shapes") {
  Tensor a = grid({2, 3}, kFloat32, 40), b = grid({4, 5}, kFloat32, 41);
  CHECK_THROWS_WITH_AS(matmul(a, b),
                       doctest::Contains("matmul: inner dimensions differ: shapes [2, 3] and [4, 5]"), Error);
  CHECK_THROWS_WITH_AS(mm(a, b), doctest::Contains("[2, 3] and [4, 5]"), Error);
  CHECK_THROWS_WITH_AS(mm(grid({2, 3, 4}, kFloat32, 1), b), doctest::Contains("mm: expected 2-D"), Error);
  CHECK_THROWS_WITH_AS(bmm(grid({2, 3, 4}, kFloat32, 1), grid({3, 4, 5}, kFloat32, 2)),
                       doctest::Contains("bmm: batch sizes differ"), Error);
  CHECK_THROWS_WITH_AS(matmul(grid({2, 3, 4}, kFloat32, 1), grid({3, 4, 5}, kFloat32, 2)),
                       doctest::Contains("cannot be broadcast"), Error);
  CHECK_THROWS_WITH_AS(matmul(a, grid({3, 2}, kFloat64, 3)), doctest::Contains("same dtype"), Error);
  CHECK_THROWS_WITH_AS(matmul(grid({}, kFloat32, 1), a), doctest::Contains("at least 1 dim"), Error);
  CHECK_THROWS_WITH_AS(linear(grid({4, 6}, kFloat32, 1), grid({3, 5}, kFloat32, 2)),
                       doctest::Contains("linear: input shape [4, 6] does not match weight shape [3, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(linear(grid({4, 5}, kFloat32, 1), grid({3, 5}, kFloat32, 2), grid({4}, kFloat32, 3)),
                       doctest::Contains("linear: expected a bias of shape [3]"), Error);
  CHECK_THROWS_WITH_AS(matmul(a.to(kBool), b.to(kBool)), doctest::Contains("bool"), Error);
}

TEST_CASE("linear_activation: relu / gelu / tanh gelu of x W^T + b against float64, bit-equal to the unfused ops") {
  auto relu_ref = [](double h) { return h > 0 ? h : 0.0; };
  auto gelu_ref = [](double h) { return 0.5 * h * (1.0 + std::erf(h / std::sqrt(2.0))); };
  auto gelu_tanh_ref = [](double h) {
    return 0.5 * h * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (h + 0.044715 * h * h * h)));
  };
  Tensor x = grid({2, 3, 10}, kFloat64, 50), w = grid({7, 10}, kFloat64, 51), bias = grid({7}, kFloat64, 52);
  std::vector<double> h = ref_mm(x.reshape({6, 10}), w.t().contiguous());
  auto bv = bias.to_vector<double>();
  for (size_t i = 0; i < h.size(); ++i) h[i] += bv[i % 7];
  for (auto [act, f] : {std::pair<Activation, double (*)(double)>{Activation::Relu, +relu_ref},
                        {Activation::Gelu, +gelu_ref},
                        {Activation::GeluTanh, +gelu_tanh_ref}}) {
    CAPTURE(static_cast<int>(act));
    std::vector<double> ref(h.size());
    for (size_t i = 0; i < h.size(); ++i) ref[i] = f(h[i]);
    check_close(linear_activation(x, w, bias, act), ref, {2, 3, 7});
    // Every dtype gives exactly linear followed by the activation op (what fusing a model relies on);
    // a non-contiguous input and no bias included.
    for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
      CAPTURE(t);
      Tensor xt = x.to(t), wt = w.to(t), bt = bias.to(t);
      Tensor unfused = act == Activation::Relu ? relu(linear(xt, wt, bt))
                                               : gelu(linear(xt, wt, bt), act == Activation::Gelu ? "none" : "tanh");
      CHECK(equal(linear_activation(xt, wt, bt, act), unfused));
      Tensor xs = xt.transpose(0, 1);
      Tensor unfused_nb = act == Activation::Relu ? relu(linear(xs, wt)) : gelu(linear(xs, wt), act == Activation::Gelu ? "none" : "tanh");
      CHECK(equal(linear_activation(xs, wt, Tensor(), act), unfused_nb));
    }
  }
  CHECK_THROWS_WITH_AS(linear_activation(grid({4, 6}, kFloat32, 1), grid({3, 5}, kFloat32, 2), Tensor(), Activation::Relu),
                       doctest::Contains("linear_activation: input shape [4, 6] does not match weight shape [3, 5]"),
                       Error);
  CHECK_THROWS_WITH_AS(linear_activation(grid({4, 5}, kFloat32, 1), grid({3, 5}, kFloat32, 2), grid({4}, kFloat32, 3),
                                         Activation::GeluTanh),
                       doctest::Contains("linear_activation: expected a bias of shape [3]"), Error);
}

TEST_CASE(
    "linear_activation_linear: exactly linear_activation then linear; shapes that do not fit name the "
    "layer") {
  Tensor x = grid({2, 3, 10}, kFloat32, 60), w1 = grid({8, 10}, kFloat32, 61), b1 = grid({8}, kFloat32, 62);
  Tensor w2 = grid({5, 8}, kFloat32, 63), b2 = grid({5}, kFloat32, 64);
  for (Activation act : {Activation::Relu, Activation::Gelu, Activation::GeluTanh}) {
    CAPTURE(static_cast<int>(act));
    auto [out, hidden, pre] = linear_activation_linear_forward(x, w1, b1, w2, b2, act);
    auto [hidden_ref, pre_ref] = linear_activation_forward(x, w1, b1, act);
    CHECK(equal(out, linear(hidden_ref, w2, b2)));
    CHECK(equal(hidden, hidden_ref));
    CHECK(pre.defined() == (act != Activation::Relu));
    if (pre.defined()) CHECK(equal(pre, pre_ref));
    CHECK(equal(linear_activation_linear(x, w1, Tensor(), w2, Tensor(), act),
                linear(linear_activation(x, w1, Tensor(), act), w2)));
  }
  CHECK_THROWS_WITH_AS(
      linear_activation_linear(x, w1, b1, grid({5, 7}, kFloat32, 1), b2, Activation::Relu),
      doctest::Contains("the second weight must be [out, 8] to take the first linear's 8 features"), Error);
  CHECK_THROWS_WITH_AS(
      linear_activation_linear(x, grid({8, 9}, kFloat32, 1), b1, w2, b2, Activation::Relu),
      doctest::Contains("linear_activation_linear (first linear): input shape [2, 3, 10] does not "
                        "match weight shape [8, 9]"),
      Error);
  CHECK_THROWS_WITH_AS(
      linear_activation_linear(x, w1, b1, w2, grid({4}, kFloat32, 1), Activation::Relu),
      doctest::Contains("linear_activation_linear (second linear): expected a bias of shape [5]"), Error);
  CHECK_THROWS_WITH_AS(
      linear_activation_linear(x, w1, b1, grid({5, 8}, kFloat64, 1), b2, Activation::Relu),
      doctest::Contains(
          "linear_activation_linear (second linear): expected both operands to have the same dtype"),
      Error);
  CHECK_THROWS_WITH_AS(
      linear_activation_linear(x, w1, b1, w2, grid({5}, kFloat64, 1), Activation::Relu),
      doctest::Contains("linear_activation_linear (second linear): bias dtype float64 differs"), Error);
}

TEST_CASE("linear_input_grad_activation: (grad W2) * activation'(pre) and its column sums against float64") {
  auto relu_d = [](double p) { return p > 0 ? 1.0 : 0.0; };
  auto gelu_d = [](double p) {
    return 0.5 * (1.0 + std::erf(p / std::sqrt(2.0))) + p * std::exp(-p * p / 2) / std::sqrt(2 * M_PI);
  };
  auto gelu_tanh_d = [](double p) {
    const double s = std::sqrt(2.0 / M_PI), c = 0.044715, t = std::tanh(s * (p + c * p * p * p));
    return 0.5 * (1.0 + t) + 0.5 * p * (1.0 - t * t) * s * (1.0 + 3.0 * c * p * p);
  };
  Tensor g = grid({6, 5}, kFloat64, 65), w2 = grid({5, 8}, kFloat64, 66), pre = grid({6, 8}, kFloat64, 67);
  const std::vector<double> gh = ref_mm(g, w2), p = test::values(pre);
  for (auto [act, d] : {std::pair<Activation, double (*)(double)>{Activation::Relu, +relu_d},
                        {Activation::Gelu, +gelu_d},
                        {Activation::GeluTanh, +gelu_tanh_d}}) {
    CAPTURE(static_cast<int>(act));
    std::vector<double> ref(gh.size()), sums(8, 0.0);
    for (size_t i = 0; i < gh.size(); ++i) {
      ref[i] = gh[i] * d(p[i]);
      sums[i % 8] += ref[i];
    }
    // relu reads its output (positive exactly where pre is), the GELUs their input.
    Tensor hidden = relu(pre);
    Tensor saved_pre = act == Activation::Relu ? Tensor() : pre;
    auto [grad_pre, grad_bias] = linear_input_grad_activation(g, w2, saved_pre, hidden, act, true);
    check_close(grad_pre, ref, {6, 8});
    check_close(grad_bias, sums, {8});
    // A transposed grad, no bias gradient; and every dtype gives exactly the unfused ops.
    auto [gt, none] = linear_input_grad_activation(g.t().contiguous().t(), w2, saved_pre, hidden, act, false);
    CHECK(equal(gt, grad_pre));
    CHECK_FALSE(none.defined());
    for (DType t : {kFloat32, kBFloat16, kFloat16}) {
      CAPTURE(t);
      Tensor gt_ = g.to(t), wt = w2.to(t), pt = pre.to(t), ht = relu(pt);
      auto [r, b] =
          linear_input_grad_activation(gt_, wt, act == Activation::Relu ? Tensor() : pt, ht, act, true);
      Tensor unfused = activation_backward(matmul(gt_, wt), pt, ht, act);
      CHECK(equal(r, unfused));
      CHECK(equal(b, unfused.sum({0})));
    }
  }
  CHECK_THROWS_WITH_AS(
      linear_input_grad_activation(g, w2, Tensor(), relu(pre), Activation::GeluTanh, true),
      doctest::Contains("linear_input_grad_activation: pre-activation is an undefined tensor"), Error);
  CHECK_THROWS_WITH_AS(
      linear_input_grad_activation(g, w2, pre.narrow(1, 0, 7), relu(pre), Activation::Gelu, true),
      doctest::Contains("expected the hidden layer as float64 [6, 8]"), Error);
  CHECK_THROWS_WITH_AS(
      linear_input_grad_activation(g, grid({4, 8}, kFloat64, 1), pre, relu(pre), Activation::Gelu, true),
      doctest::Contains("expected grad [R, out] and weight [out, hidden]"), Error);
}

TEST_CASE("linear_weight_grad: grad^T x and the column sums of grad against float64") {
  for (DType t : {kFloat32, kBFloat16, kFloat16, kFloat64}) {
    CAPTURE(t);
    Tensor g = grid({6, 4}, t, 53), x = grid({10, 6}, t, 54).t();  // x [6, 10], non-contiguous
    auto [gw, gb] = linear_weight_grad(g, x, true);
    check_close(gw, ref_mm(g.t().contiguous(), x.contiguous()), {4, 10});
    std::vector<double> gv = g.to_vector<double>(), sums(4, 0.0);
    for (size_t i = 0; i < gv.size(); ++i) sums[i % 4] += gv[i];
    check_close(gb, sums, {4});
    auto [gw2, none] = linear_weight_grad(g, x, false);
    CHECK(equal(gw2, gw));
    CHECK_FALSE(none.defined());
  }
  CHECK_THROWS_WITH_AS(linear_weight_grad(grid({6, 4}, kFloat32, 1), grid({5, 3}, kFloat32, 2), true),
                       doctest::Contains("linear_weight_grad: expected grad [R, out] and x [R, in] with the same rows"),
                       Error);
}
