/*
 * The multi-tensor optimizer ops on the CPU (ops/optim_ops.h) against an independent scalar
 * reference written from torch.optim's formulas in float64: fused_adam_ (Adam, AdamW,
 * amsgrad, maximize, tensors at different step counts), fused_sgd_ (momentum's first and later
 * steps, dampening, nesterov), foreach_norm_reduce for several orders, foreach_mul_, and the
 * errors that name the op. The optimizers built on them: tests/nn/test_optim.cpp.
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

const Tol kF64{1e-13, 1e-15};

TEST_CASE("fused_adam_: Adam and AdamW, amsgrad and maximize, against a scalar float64 reference") {
  for (bool decoupled : {false, true}) {
    for (bool amsgrad : {false, true}) {
      for (bool maximize : {false, true}) {
        CAPTURE(decoupled);
        CAPTURE(amsgrad);
        CAPTURE(maximize);
        AdamStepOptions o;
        o.lr = 0.01, o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-6, o.weight_decay = 0.1;
        o.decoupled = decoupled, o.amsgrad = amsgrad, o.maximize = maximize;
        const std::vector<int64_t> steps{1, 4};  // each tensor its own bias corrections
        std::vector<Tensor> p{pat({7}, 0.1).to(kFloat64), pat({2, 3}, 0.2).to(kFloat64)};
        std::vector<Tensor> g{pat({7}, 1.1).to(kFloat64), pat({2, 3}, 1.2).to(kFloat64)};
        std::vector<Tensor> m{pat({7}, 2.1, 0.1).to(kFloat64), pat({2, 3}, 2.2, 0.1).to(kFloat64)};
        std::vector<Tensor> v{pat({7}, 3.1, 0.1).abs().to(kFloat64), pat({2, 3}, 3.2, 0.1).abs().to(kFloat64)};
        std::vector<Tensor> vmax;
        if (amsgrad) vmax = {pat({7}, 4.1, 0.1).abs().to(kFloat64), pat({2, 3}, 4.2, 0.1).abs().to(kFloat64)};
        std::vector<std::vector<double>> ep, em, ev, evmax;
        for (size_t k = 0; k < p.size(); ++k) {
          std::vector<double> pk = values(p[k]), gk = values(g[k]), mk = values(m[k]), vk = values(v[k]);
          std::vector<double> xk = amsgrad ? values(vmax[k]) : std::vector<double>(pk.size());
          const double t = static_cast<double>(steps[k]);
          for (size_t i = 0; i < pk.size(); ++i) {
            double gi = maximize ? -gk[i] : gk[i];
            if (decoupled)
              pk[i] *= 1 - o.lr * o.weight_decay;
            else
              gi += o.weight_decay * pk[i];
            mk[i] = o.beta1 * mk[i] + (1 - o.beta1) * gi;
            vk[i] = o.beta2 * vk[i] + (1 - o.beta2) * gi * gi;
            xk[i] = std::max(xk[i], vk[i]);
            const double second = amsgrad ? xk[i] : vk[i];
            const double denom = std::sqrt(second) / std::sqrt(1 - std::pow(o.beta2, t)) + o.eps;
            pk[i] -= o.lr / (1 - std::pow(o.beta1, t)) * mk[i] / denom;
          }
          ep.push_back(pk), em.push_back(mk), ev.push_back(vk), evmax.push_back(xk);
        }
        fused_adam_(p, g, m, v, vmax, steps, o);
        for (size_t k = 0; k < p.size(); ++k) {
          CHECK(mismatch(values(p[k]), ep[k], kF64) == "");
          CHECK(mismatch(values(m[k]), em[k], kF64) == "");
          CHECK(mismatch(values(v[k]), ev[k], kF64) == "");
          if (amsgrad) CHECK(mismatch(values(vmax[k]), evmax[k], kF64) == "");
        }
      }
    }
  }
}

TEST_CASE("fused_sgd_: plain, momentum (first and later steps), dampening, nesterov, weight decay") {
  struct Case {
    double momentum, dampening;
    bool nesterov;
  };
  for (Case c : {Case{0, 0, false}, Case{0.9, 0, false}, Case{0.9, 0.3, false}, Case{0.9, 0, true}}) {
    CAPTURE(c.momentum);
    CAPTURE(c.dampening);
    CAPTURE(c.nesterov);
    SgdStepOptions o;
    o.lr = 0.1, o.momentum = c.momentum, o.dampening = c.dampening, o.weight_decay = 0.01, o.nesterov = c.nesterov;
    std::vector<Tensor> p{pat({9}, 0.1).to(kFloat64)};
    std::vector<Tensor> buf;
    if (c.momentum != 0) buf.push_back(empty({9}, kFloat64));
    std::vector<double> ep = values(p[0]), eb(9, 0.0);
    for (int s = 0; s < 3; ++s) {
      const std::vector<Tensor> g{pat({9}, 1.0 + s).to(kFloat64)};
      const std::vector<double> gv = values(g[0]);
      for (size_t i = 0; i < ep.size(); ++i) {
        double d = gv[i] + o.weight_decay * ep[i];
        if (c.momentum != 0) {
          eb[i] = s == 0 ? d : c.momentum * eb[i] + (1 - c.dampening) * d;
          d = c.nesterov ? d + c.momentum * eb[i] : eb[i];
        }
        ep[i] -= o.lr * d;
      }
      o.first_step = s == 0;
      fused_sgd_(p, g, buf, o);
    }
    CHECK(mismatch(values(p[0]), ep, kF64) == "");
    if (c.momentum != 0) CHECK(mismatch(values(buf[0]), eb, kF64) == "");
  }
}

TEST_CASE("foreach_norm_reduce: sum |x|^p over every tensor, max |x| for infinity, in float64") {
  const std::vector<Tensor> ts{make({3, -4}, {2}, kFloat32), make({1, -2, 2}, {3}, kFloat64), zeros({0})};
  CHECK(foreach_norm_reduce(ts, 2.0, kCPU).item<double>() == 34.0);
  CHECK(foreach_norm_reduce(ts, 1.0, kCPU).item<double>() == 12.0);
  CHECK(foreach_norm_reduce(ts, 3.0, kCPU).item<double>() == doctest::Approx(27 + 64 + 1 + 8 + 8));
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(foreach_norm_reduce(ts, inf, kCPU).item<double>() == 4.0);
  CHECK(foreach_norm_reduce(ts, inf, kCPU).dtype() == kFloat64);
  CHECK(foreach_norm_reduce({}, 2.0, kCPU).item<double>() == 0.0);
  const std::vector<Tensor> with_nan{make({1, std::numeric_limits<double>::quiet_NaN()}, {2}, kFloat32)};
  CHECK(std::isnan(foreach_norm_reduce(with_nan, inf, kCPU).item<double>()));
}

TEST_CASE(
    "fused_adam_ and fused_sgd_: the capturable forms (counts and lr in tensors) equal the host forms") {
  AdamStepOptions o;
  o.lr = 0.02, o.beta1 = 0.8, o.beta2 = 0.95, o.eps = 1e-6, o.weight_decay = 0.1, o.decoupled = true;
  auto fresh = [](double seed) {
    return std::vector<Tensor>{pat({7}, seed), pat({2, 3}, seed + 0.1), zeros({0})};
  };
  std::vector<Tensor> p_host = fresh(0.1), m_host = fresh(0.5), v_host = fresh(0.9);
  std::vector<Tensor> p_dev = fresh(0.1), m_dev = fresh(0.5), v_dev = fresh(0.9);
  for (auto* list : {&v_host, &v_dev})
    for (Tensor& v : *list) v = v.abs();
  const std::vector<Tensor> counts{full({}, 0, kInt64), full({}, 3, kInt64), full({}, 1, kInt64)};
  AdamStepOptions ignored = o;
  ignored.lr = 0;  // the capturable form reads the lr tensor instead
  for (int s = 0; s < 2; ++s) {
    const std::vector<Tensor> g = fresh(1.3 + s);
    o.lr = 0.02 / (s + 1);
    fused_adam_(p_host, g, m_host, v_host, {}, std::vector<int64_t>{1 + s, 4 + s, 2 + s}, o);
    fused_adam_(p_dev, g, m_dev, v_dev, {}, counts, full({}, o.lr, kFloat64), ignored);
  }
  for (size_t k = 0; k < p_host.size(); ++k) {
    CAPTURE(k);
    CHECK(equal(p_dev[k], p_host[k]));
    CHECK(equal(m_dev[k], m_host[k]));
    CHECK(equal(v_dev[k], v_host[k]));
  }
  CHECK(counts[0].item<int64_t>() == 2);
  CHECK(counts[1].item<int64_t>() == 5);
  CHECK(counts[2].item<int64_t>() == 3);  // an empty tensor's count advances too

  SgdStepOptions sgd;
  sgd.lr = 0.3, sgd.weight_decay = 0.01;
  std::vector<Tensor> q_host = fresh(0.2), q_dev = fresh(0.2);
  fused_sgd_(q_host, fresh(2.0), {}, sgd);
  sgd.lr = 0;
  fused_sgd_(q_dev, fresh(2.0), {}, full({}, 0.3, kFloat64), sgd);
  for (size_t k = 0; k < q_host.size(); ++k) CHECK(equal(q_dev[k], q_host[k]));

  CHECK_THROWS_WITH_AS(
      fused_adam_(p_dev, p_dev, m_dev, v_dev, {}, {counts[0]}, full({}, 0.1, kFloat64), ignored),
      doctest::Contains("fused_adam_: step_counts has 1 tensors but params has 3"), Error);
  CHECK_THROWS_WITH_AS(
      fused_adam_(p_dev, p_dev, m_dev, v_dev, {}, {counts[0], counts[1], full({1}, 0, kInt64)},
                  full({}, 0.1, kFloat64), ignored),
      doctest::Contains("fused_adam_: step_counts[2] must be a 0-dim int64 on cpu, got int64 [1] on cpu"),
      Error);
  CHECK_THROWS_WITH_AS(fused_sgd_(q_dev, q_dev, {}, Tensor(), sgd),
                       doctest::Contains("fused_sgd_: lr is an undefined tensor"), Error);
}

TEST_CASE("fused_adam_ and fused_sgd_: a nonzero found_inf skips the whole step, counts included") {
  auto fresh = [](double seed) { return std::vector<Tensor>{pat({5}, seed), pat({2, 2}, seed + 0.1)}; };
  auto clones = [](const std::vector<Tensor>& ts) {
    std::vector<Tensor> out;
    for (const Tensor& t : ts) out.push_back(t.clone());
    return out;
  };
  AdamStepOptions adam;
  adam.beta1 = 0.9, adam.beta2 = 0.99, adam.eps = 1e-8;
  std::vector<Tensor> p = fresh(0.3), m = fresh(0.6), v = fresh(0.7);
  for (Tensor& t : v) t = t.abs();
  const std::vector<Tensor> p0 = clones(p), m0 = clones(m), v0 = clones(v);
  const std::vector<Tensor> counts{full({}, 2, kInt64), full({}, 7, kInt64)};
  const Tensor lr = full({}, 0.05, kFloat64);
  fused_adam_(p, fresh(1.1), m, v, {}, counts, lr, adam, full({1}, 1.0f));
  for (size_t k = 0; k < p.size(); ++k) {
    CAPTURE(k);
    CHECK(equal(p[k], p0[k]));
    CHECK(equal(m[k], m0[k]));
    CHECK(equal(v[k], v0[k]));
  }
  CHECK(counts[0].item<int64_t>() == 2);
  CHECK(counts[1].item<int64_t>() == 7);
  // A zero flag is the step without one.
  std::vector<Tensor> p_flag = clones(p), m_flag = clones(m), v_flag = clones(v);
  const std::vector<Tensor> counts_flag{full({}, 2, kInt64), full({}, 7, kInt64)};
  fused_adam_(p, fresh(1.1), m, v, {}, counts, lr, adam);
  fused_adam_(p_flag, fresh(1.1), m_flag, v_flag, {}, counts_flag, lr, adam, zeros({1}));
  for (size_t k = 0; k < p.size(); ++k) CHECK(equal(p_flag[k], p[k]));
  CHECK(counts_flag[1].item<int64_t>() == 8);

  SgdStepOptions sgd;
  sgd.momentum = 0.9;
  std::vector<Tensor> q = fresh(0.4), buf = fresh(0.8);
  const std::vector<Tensor> q0 = clones(q), buf0 = clones(buf);
  fused_sgd_(q, fresh(2.2), buf, lr, sgd, full({1}, 1.0f));
  for (size_t k = 0; k < q.size(); ++k) CHECK((equal(q[k], q0[k]) && equal(buf[k], buf0[k])));
  fused_sgd_(q, fresh(2.2), buf, lr, sgd, zeros({1}));
  CHECK_FALSE(equal(q[0], q0[0]));

  CHECK_THROWS_WITH_AS(fused_sgd_(q, q, buf, lr, sgd, zeros({1}, kFloat64)),
                       doctest::Contains("fused_sgd_: found_inf must be one float32 element on cpu"), Error);
  CHECK_THROWS_WITH_AS(fused_adam_(p, p, m, v, {}, counts, lr, adam, zeros({2})),
                       doctest::Contains("fused_adam_: found_inf must be one float32 element on cpu"), Error);
}

TEST_CASE("foreach_mul_: every tensor times a float64 scalar tensor, rounded to its dtype") {
  std::vector<Tensor> ts{make({1, -2}, {2}, kFloat32), make({3}, {1}, kFloat64)};
  foreach_mul_(ts, full({}, 0.1, kFloat64));
  CHECK(values(ts[0]) == std::vector<double>{0.1f, -2 * 0.1f});
  CHECK(values(ts[1]) == std::vector<double>{3 * 0.1});
}

TEST_CASE("optimizer ops: bad inputs throw naming the op, the list and the shapes") {
  AdamStepOptions a;
  a.lr = 0.1, a.beta1 = 0.9, a.beta2 = 0.999;
  const std::vector<Tensor> one{zeros({3})};
  CHECK_THROWS_WITH_AS(fused_adam_(one, {zeros({4})}, one, one, {}, {1}, a),
                       doctest::Contains("fused_adam_: grads[0] is float32 [4] on cpu but params[0] is float32 [3]"),
                       Error);
  CHECK_THROWS_WITH_AS(fused_adam_(one, one, one, one, {}, {0}, a), doctest::Contains("fused_adam_: steps[0] is 0"),
                       Error);
  a.beta1 = 1.0;
  CHECK_THROWS_WITH_AS(fused_adam_(one, one, one, one, {}, {1}, a), doctest::Contains("fused_adam_: beta1 and beta2"),
                       Error);
  SgdStepOptions s;
  s.lr = 0.1;
  CHECK_THROWS_WITH_AS(fused_sgd_({zeros({3}, kInt64)}, {zeros({3}, kInt64)}, {}, s),
                       doctest::Contains("fused_sgd_: params[0] has dtype int64"), Error);
  CHECK_THROWS_WITH_AS(fused_sgd_(one, one, one, s), doctest::Contains("momentum_buffers must be empty"), Error);
  CHECK_THROWS_WITH_AS(foreach_norm_reduce(one, 0.0, kCPU), doctest::Contains("foreach_norm_reduce: norm_type"),
                       Error);
  CHECK_THROWS_WITH_AS(foreach_norm_reduce({zeros({4, 4}).t()}, 2.0, kCPU),
                       doctest::Contains("foreach_norm_reduce: tensors[0] of shape [4, 4] is not contiguous"), Error);
  CHECK_THROWS_WITH_AS(foreach_mul_(one, full({}, 2.0)), doctest::Contains("foreach_mul_: scale must be one float64"),
                       Error);
}

}  // namespace
