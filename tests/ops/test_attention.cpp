/*
 * scaled_dot_product_attention against a float64 reference written here with loops (no Loom
 * op in it): plain, causal (L == S, L > S, L < S), bool and float masks broadcast from [L, S]
 * and [H, 1, S], non-contiguous inputs, explicit scale; the fused op's CPU kernel
 * (flash_attention_forward/backward) against the same reference and central differences;
 * and every bad input throwing with the op, the shapes and the dtypes in the message.
 */
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/ops.h"
#include "tests/test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

// softmax(scale q k^T + bias) v for q [N, L, E], k [N, S, E], v [N, S, Ev]; bias(n, i, j) is
// the additive mask (-inf for a masked key).
template <class Bias>
std::vector<double> reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Bias& bias) {
  const int64_t n = q.size(0), l = q.size(1), e = q.size(2), s = k.size(1), ev = v.size(2);
  const std::vector<double> qv = q.contiguous().to_vector<double>(), kv = k.contiguous().to_vector<double>(),
                            vv = v.contiguous().to_vector<double>();
  std::vector<double> out(static_cast<size_t>(n * l * ev), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t i = 0; i < l; ++i) {
      std::vector<double> w(static_cast<size_t>(s));
      double m = -std::numeric_limits<double>::infinity(), sum = 0;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < e; ++c) dot += qv[(b * l + i) * e + c] * kv[(b * s + j) * e + c];
        w[j] = dot * scale + bias(b, i, j);
        m = std::max(m, w[j]);
      }
      for (int64_t j = 0; j < s; ++j) sum += (w[j] = std::exp(w[j] - m));
      for (int64_t j = 0; j < s; ++j)
        for (int64_t c = 0; c < ev; ++c) out[(b * l + i) * ev + c] += w[j] / sum * vv[(b * s + j) * ev + c];
    }
  return out;
}

const auto kNoBias = [](int64_t, int64_t, int64_t) { return 0.0; };
const auto kCausalBias = [](int64_t, int64_t i, int64_t j) {
  return j > i ? -std::numeric_limits<double>::infinity() : 0.0;
};

Tensor data(IntArrayRef shape, double seed) { return pat(shape, seed, 1.2).to(kFloat64); }

constexpr Tol kTol{1e-12, 1e-12};

}  // namespace

TEST_CASE("scaled_dot_product_attention: plain and causal against the reference") {
  Tensor q = data({2, 5, 4}, 0.1), k = data({2, 5, 4}, 0.2), v = data({2, 5, 3}, 0.3);
  check_close(scaled_dot_product_attention(q, k, v), reference(q, k, v, 0.5, kNoBias), kTol);
  check_close(scaled_dot_product_attention(q, k, v, {}, 0.0, true), reference(q, k, v, 0.5, kCausalBias), kTol);
  check_close(scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.3), reference(q, k, v, 0.3, kNoBias), kTol);
  // Causal with L > S and L < S: the top-left triangle, as torch.
  for (int64_t s : {3, 7}) {
    CAPTURE(s);
    Tensor k2 = data({2, s, 4}, 0.4), v2 = data({2, s, 3}, 0.5);
    check_close(scaled_dot_product_attention(q, k2, v2, {}, 0.0, true), reference(q, k2, v2, 0.5, kCausalBias), kTol);
  }
  // Extra batch dims [B, H, L, E] are flattened and restored.
  Tensor out = scaled_dot_product_attention(q.view({1, 2, 5, 4}), k.view({1, 2, 5, 4}), v.view({1, 2, 5, 3}));
  CHECK(out.sizes().vec() == std::vector<int64_t>{1, 2, 5, 3});
  check_close(out, reference(q, k, v, 0.5, kNoBias), kTol);
}

TEST_CASE("scaled_dot_product_attention: bool and float masks broadcast") {
  Tensor q = data({2, 3, 4}, 1.1), k = data({2, 6, 4}, 1.2), v = data({2, 6, 2}, 1.3);
  // bool [L, S]: true takes part.
  Tensor keep = pat({3, 6}, 1.4).gt(-0.3).logical_or(ones({3, 6}, kBool).tril());
  const std::vector<double> kv = keep.to(kFloat64).to_vector<double>();
  auto keep_bias = [&](int64_t, int64_t i, int64_t j) {
    return kv[i * 6 + j] != 0 ? 0.0 : -std::numeric_limits<double>::infinity();
  };
  check_close(scaled_dot_product_attention(q, k, v, keep), reference(q, k, v, 0.5, keep_bias), kTol);
  // float [N, 1, S]: broadcast over the query rows.
  Tensor bias = data({2, 1, 6}, 1.5);
  const std::vector<double> bv = bias.to_vector<double>();
  check_close(scaled_dot_product_attention(q, k, v, bias),
              reference(q, k, v, 0.5, [&](int64_t b, int64_t, int64_t j) { return bv[b * 6 + j]; }), kTol);
  // [H, 1, S] against [B, H, L, E]: a mask with batch dims of its own.
  Tensor out = scaled_dot_product_attention(q.view({1, 2, 3, 4}), k.view({1, 2, 6, 4}), v.view({1, 2, 6, 2}), bias);
  check_close(out, reference(q, k, v, 0.5, [&](int64_t b, int64_t, int64_t j) { return bv[b * 6 + j]; }), kTol);
}

TEST_CASE("scaled_dot_product_attention: non-contiguous inputs") {
  // [N, E, L] transposed to [N, L, E], and a value sliced out of a wider tensor.
  Tensor q = data({2, 4, 5}, 2.1).transpose(1, 2), k = data({2, 4, 5}, 2.2).transpose(1, 2);
  Tensor v = data({2, 5, 6}, 2.3).slice(2, 1, 4);
  REQUIRE(!q.is_contiguous());
  REQUIRE(!v.is_contiguous());
  check_close(scaled_dot_product_attention(q, k, v, {}, 0.0, true), reference(q, k, v, 0.5, kCausalBias), kTol);
  check_close(std::get<0>(flash_attention_forward(q, k, v, {}, 0.5, true)), reference(q, k, v, 0.5, kCausalBias),
              kTol);
}

TEST_CASE("flash_attention: the CPU kernel against the reference and the written-out gradient") {
  Tensor q = data({2, 5, 4}, 3.1), k = data({2, 7, 4}, 3.2), v = data({2, 7, 3}, 3.3);
  Tensor keep = pat({5, 7}, 3.4).gt(-0.3).logical_or(ones({5, 7}, kBool).tril());
  for (bool is_causal : {false, true}) {
    CAPTURE(is_causal);
    Tensor mask = is_causal ? Tensor() : keep;
    auto [out, lse] = flash_attention_forward(q, k, v, mask, 0.4, is_causal);
    CHECK(lse.dtype() == kFloat64);
    check_close(out, values(scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, 0.4)), kTol);
    // logsumexp_i = log sum_j exp(scores): exp(lse) normalises the row.
    Tensor scores = (q.bmm(k.transpose(1, 2)) * 0.4)
                        .add(is_causal ? where(ones({5, 7}, kBool).tril(), zeros({5, 7}, kFloat64), -kInf)
                                       : where(keep, zeros({5, 7}, kFloat64), -kInf));
    check_close(lse, values(scores.exp().sum({-1}).log()), kTol);

    // The backward against central differences of sum(out * go) in float64.
    Tensor go = data({2, 5, 3}, 3.5);
    auto [dq, dk, dv] = flash_attention_backward(go, q, k, v, out, lse, mask, 0.4, is_causal);
    auto objective = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv) {
      return (std::get<0>(flash_attention_forward(qq, kk, vv, mask, 0.4, is_causal)) * go).sum().item<double>();
    };
    const Tensor grads[] = {dq, dk, dv};
    for (int which = 0; which < 3; ++which) {
      CAPTURE(which);
      const Tensor& x = which == 0 ? q : which == 1 ? k : v;
      std::vector<double> numeric(static_cast<size_t>(x.numel()));
      for (int64_t idx = 0; idx < x.numel(); ++idx) {
        Tensor plus = x.clone(), minus = x.clone();
        plus.data_ptr<double>()[idx] += 1e-6;
        minus.data_ptr<double>()[idx] -= 1e-6;
        const double f_plus = objective(which == 0 ? plus : q, which == 1 ? plus : k, which == 2 ? plus : v);
        const double f_minus = objective(which == 0 ? minus : q, which == 1 ? minus : k, which == 2 ? minus : v);
        numeric[static_cast<size_t>(idx)] = (f_plus - f_minus) / 2e-6;
      }
      check_close(grads[which], numeric, Tol{1e-6, 1e-7});
    }
  }
  // float32 and the 16-bit dtypes compute in float: close to the float64 result.
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    CAPTURE(dt);
    auto [out, lse] = flash_attention_forward(q.to(dt), k.to(dt), v.to(dt), {}, 0.4, true);
    CHECK(out.dtype() == dt);
    CHECK(lse.dtype() == kFloat32);
    check_close(out, values(scaled_dot_product_attention(q.to(dt).to(kFloat64), k.to(dt).to(kFloat64),
                                                         v.to(dt).to(kFloat64), {}, 0.0, true, 0.4)),
                dt == kFloat32 ? Tol{1e-5, 1e-6} : Tol{1e-2, 1e-2});
  }
}

TEST_CASE("flash_attention: a row with every key masked gives 0 and no gradient") {
  Tensor q = data({1, 2, 3}, 4.1), k = data({1, 3, 3}, 4.2), v = data({1, 3, 2}, 4.3);
  Tensor keep = tensor<bool>({true, false, true, false, false, false}, {2, 3});
  auto [out, lse] = flash_attention_forward(q, k, v, keep, 1.0, false);
  check_close(out.select(1, 1), {0.0, 0.0}, kTol);
  CHECK(lse.to_vector<double>()[1] == -kInf);
  auto [dq, dk, dv] = flash_attention_backward(ones({1, 2, 2}, kFloat64), q, k, v, out, lse, keep, 1.0, false);
  check_close(dq.select(1, 1), {0.0, 0.0, 0.0}, kTol);
  // The written-out path gives NaN for that row, as torch's math path.
  CHECK(std::isnan(scaled_dot_product_attention(q, k, v, keep).to_vector<double>()[2]));
}

TEST_CASE("scaled_dot_product_attention: bad inputs throw naming the problem") {
  Tensor q = data({2, 3, 4}, 5.1), k = data({2, 5, 4}, 5.2), v = data({2, 5, 3}, 5.3);
  auto sdpa_error = [](auto... args) { return error_of([&] { scaled_dot_product_attention(args...); }); };
  std::string e = sdpa_error(Tensor(), k, v);
  CHECK(e.find("scaled_dot_product_attention: query is an undefined tensor") != std::string::npos);
  e = sdpa_error(q, data({2, 5, 3}, 0), v);
  CHECK(e.find("key's last dim") != std::string::npos);
  CHECK(e.find("query [2, 3, 4] float64, key [2, 5, 3] float64") != std::string::npos);
  e = sdpa_error(q, k, data({2, 4, 3}, 0));
  CHECK(e.find("value to have as many rows as key") != std::string::npos);
  e = sdpa_error(q, k, v.to(kFloat32));
  CHECK(e.find("one floating dtype") != std::string::npos);
  CHECK(e.find("value [2, 5, 3] float32") != std::string::npos);
  e = sdpa_error(q.to(kInt64), k.to(kInt64), v.to(kInt64));
  CHECK(e.find("one floating dtype") != std::string::npos);
  e = sdpa_error(q, data({3, 5, 4}, 0), data({3, 5, 3}, 0));
  CHECK(e.find("same leading (batch) dims") != std::string::npos);
  e = sdpa_error(data({4}, 0), data({4}, 0), data({4}, 0));
  CHECK(e.find("of one rank >= 2") != std::string::npos);
  e = sdpa_error(q, k, v, data({3, 4}, 0));
  CHECK(e.find("attn_mask broadcastable to [..., L, S] = [2, 3, 5]") != std::string::npos);
  e = sdpa_error(q, k, v, data({3, 5}, 0).to(kFloat32));
  CHECK(e.find("a bool attn_mask or one of query's dtype") != std::string::npos);
  e = sdpa_error(q, k, v, ones({3, 5}, kBool), 0.0, true);
  CHECK(e.find("is_causal and an explicit attn_mask") != std::string::npos);
  e = sdpa_error(q, k, v, Tensor(), 1.5);
  CHECK(e.find("dropout_p in [0, 1], got 1.5") != std::string::npos);
  // The fused op: 3-D only, and no gradient for the mask.
  e = error_of([&] { flash_attention_forward(q.view({1, 2, 3, 4}), k.view({1, 2, 5, 4}), v.view({1, 2, 5, 3}), {},
                                             1.0, false); });
  CHECK(e.find("flash_attention: expected query") != std::string::npos);
  auto [out, lse] = flash_attention_forward(q, k, v, {}, 1.0, false);
  e = error_of([&] { flash_attention_backward(out, q, k, v, out, lse.to(kFloat32), {}, 1.0, false); });
  CHECK(e.find("flash_attention_backward: expected logsumexp of shape [2, 3] and dtype float64") !=
        std::string::npos);
}

TEST_CASE("scaled_dot_product_attention: dropout keeps the expected value shape and drops weights") {
  Tensor q = data({1, 4, 4}, 6.1), k = data({1, 4, 4}, 6.2), v = ones({1, 4, 2}, kFloat64);
  manual_seed(3);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.5);
  // With v all ones, each output is the sum of the kept weights, rescaled by 2: not all 1.
  std::vector<double> o = out.to_vector<double>();
  bool any_differs = false;
  for (double x : o) any_differs |= std::abs(x - 1.0) > 1e-9;
  CHECK(any_differs);
}
