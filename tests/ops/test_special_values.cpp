/* Infinities and underflow through the vectorised transcendental paths: exp(-inf) is exactly
 * 0 (Eigen's AVX2 exp alone gives 2.9e-39), so masked logits give exactly zero probability. */
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

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
