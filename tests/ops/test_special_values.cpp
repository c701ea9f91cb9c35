/* Infinities and underflow through the vectorised transcendental paths: exp(-inf) is exactly
 * 0 (Eigen's AVX2 exp alone gives 2.9e-39), so masked logits give exactly zero probability; and
 * GELU's gradient at the infinities is the same in every instruction set. */
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/cpu/vector_isa.h"
#include "ops/ops.h"

using namespace loom;

TEST_CASE("exp, softmax and log_softmax with -inf entries give exact zeros") {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dt : {kFloat32, kFloat64}) {
    CAPTURE(dt);
    // 40 elements so that the vectorised body, not only the scalar tail, sees -inf.
    Tensor x = zeros({40}, dt);
    x.slice(0, 0, 40, 2).fill_(-inf);
    std::vector<double> e = exp(x).to_vector<double>();
    for (size_t i = 0; i < e.size(); ++i) CHECK(e[i] == (i % 2 == 0 ? 0.0 : 1.0));
    CHECK(exp(full({20}, -1000.0, dt)).sum().item<double>() == 0.0);

    Tensor logits = zeros({3, 40}, dt);
    logits.slice(1, 20).fill_(-inf);  // a causal-style mask
    for (int64_t dim : {1, 0}) {
      Tensor l = dim == 1 ? logits : logits.t().contiguous();
      std::vector<double> p = softmax(l, dim).to_vector<double>();
      std::vector<double> lp = log_softmax(l, dim).to_vector<double>();
      for (size_t i = 0; i < p.size(); ++i) {
        bool masked = dim == 1 ? (i % 40) >= 20 : (i / 3) >= 20;
        CHECK(p[i] == (masked ? 0.0 : doctest::Approx(1.0 / 20)));
        if (masked) CHECK(std::isinf(lp[i]));
      }
    }
  }
}

// gelu'(x) = Phi(x) + x phi(x) (erf) and its tanh form: at +-inf, inf * phi(inf) and inf * (1 - t^2)
// are inf * 0, NaN, as PyTorch computes them on either device; at large finite x, 1 or ~0. Eigen's
// clamped exp made phi(+-inf) 1e-39 in SSE2 and AVX2 code, so the erf form's gradient at +-inf was
// +-inf there and NaN in AVX-512 code (and on the GPU). 40 values: the vector body sees each.
TEST_CASE("gelu_backward at the infinities is NaN in every instruction set, 1 or 0 at large x") {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> x(40, 0.5);
  x[3] = inf, x[17] = -inf, x[21] = 30.0, x[30] = -30.0;
  const cpu::VectorIsa saved = cpu::vector_isa();
  for (cpu::VectorIsa isa : {cpu::VectorIsa::Baseline, cpu::VectorIsa::Avx2, cpu::VectorIsa::Avx512}) {
    cpu::set_vector_isa(isa);
    for (DType dt : {kFloat32, kFloat64}) {
      for (const char* approximate : {"none", "tanh"}) {
        const std::string isa_name = cpu::vector_isa_name(cpu::vector_isa()), form = approximate;
        CAPTURE(isa_name);
        CAPTURE(dt);
        CAPTURE(form);
        const std::vector<double> g =
            gelu_backward(ones({40}, dt), tensor<double>(x, {40}).to(dt), approximate).to_vector<double>();
        CHECK(std::isnan(g[3]));
        CHECK(std::isnan(g[17]));
        CHECK(g[21] == doctest::Approx(1.0).epsilon(1e-12));
        CHECK(std::abs(g[30]) < 1e-30);
      }
    }
  }
  cpu::set_vector_isa(saved);
}
