/*
 * multinomial (ops/sort_ops.h): categorical sampling composed of existing ops, so that it runs
 * on every device and gives the same samples there for the same generator state.
 *
 * The exponential race: give category c a clock E_c ~ Exp(1) and weight w_c; the clock E_c / w_c
 * that stops first belongs to category c with probability w_c / sum(w), and the order in which
 * the clocks stop is the order of draws without replacement (each draw proportional to the
 * weights that are left). So without replacement the sample is topk(w / E, n); with replacement
 * each of the n draws is the argmax over its own clocks. E = -log1p(-u) with u ~ U[0, 1) is
 * finite; a zero weight gets the key -inf, so it is never drawn while a positive weight is left.
 * With replacement this costs B x n x C random numbers, where an inverse-CDF search would need
 * B x n; the keys are made in chunks of about 2^24.
 */
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/factories.h"
#include "ops/op_utils.h"
#include "ops/reduction.h"
#include "ops/shape_ops.h"
#include "ops/sort_ops.h"
#include "ops/view_ops.h"

namespace loom {

namespace {

// The weights' problems, read back in one copy: the smallest weight, the largest (NaN when one
// is NaN), the smallest row sum and the fewest non-zero weights of a row.
void check_weights(const Tensor& w, int64_t num_samples, bool replacement) {
  const Tensor summary = stack({amin(w), amax(w), amin(sum(w, {1})), amin(sum(ne(w, 0), {1})).to(w.dtype())});
  const std::vector<double> s = summary.to_vector<double>();
  LOOM_CHECK(!(s[0] < 0), "multinomial: weights must be non-negative, got ", s[0]);
  LOOM_CHECK(std::isfinite(s[1]), "multinomial: weights must be finite, got ", s[1]);
  LOOM_CHECK(s[2] > 0, "multinomial: a row of weights sums to 0 (shape ", w.sizes(), ")");
  LOOM_CHECK(replacement || s[3] >= static_cast<double>(num_samples), "multinomial: cannot draw ",
             num_samples, " samples without replacement from a row with ", s[3], " non-zero weights");
}

}  // namespace

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* generator) {
  check_defined(probs, "multinomial");
  LOOM_CHECK(probs.dim() == 1 || probs.dim() == 2,
             "multinomial: expected weights of shape [C] or [B, C], got ", probs.sizes());
  check_floating(probs, "multinomial");
  const int64_t categories = probs.sizes().back();
  LOOM_CHECK(categories > 0, "multinomial: expected at least one category, got shape ", probs.sizes());
  LOOM_CHECK(num_samples > 0, "multinomial: expected a positive number of samples, got ", num_samples);
  LOOM_CHECK(replacement || num_samples <= categories, "multinomial: cannot draw ", num_samples,
             " samples without replacement from ", categories, " categories");
  AutoGradMode no_grad(false);  // a sample has no gradient
  // Keys in float32 at least: 16-bit clocks would tie often.
  const DType key_dtype = probs.dtype() == kFloat64 ? kFloat64 : kFloat32;
  const Tensor w = (probs.dim() == 1 ? probs.unsqueeze(0) : probs).to(key_dtype);
  check_weights(w, num_samples, replacement);
  const int64_t rows = w.size(0);
  const TensorOptions options = TensorOptions(key_dtype).device(w.device());
  Tensor samples;
  if (replacement) {
    // Draws in chunks of about 2^24 keys, so that many samples from a large vocabulary do not
    // hold B x n x C keys at once.
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 24) / (rows * categories));
    const Tensor weights = w.unsqueeze(1);
    std::vector<Tensor> draws;
    for (int64_t begin = 0; begin < num_samples; begin += chunk) {
      const int64_t n = std::min(chunk, num_samples - begin);
      const Tensor clocks = neg(log1p(neg(rand({rows, n, categories}, options, generator))));
      draws.push_back(argmax(where(gt(weights, 0), div(weights, clocks), -INFINITY), 2));
    }
    samples = draws.size() == 1 ? draws[0] : cat(draws, 1);
  } else {
    const Tensor clocks = neg(log1p(neg(rand({rows, categories}, options, generator))));
    samples = std::get<1>(topk(where(gt(w, 0), div(w, clocks), -INFINITY), num_samples, 1));
  }
  return probs.dim() == 1 ? samples.squeeze(0) : samples;
}

}  // namespace loom
