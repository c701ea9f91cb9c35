/* The mlp and gpt as the planner sees them (see model_spec.h for the formulas' sources). */
#include "distributed/plan/model_spec.h"

#include <numeric>

#include "core/error.h"

namespace loom::distributed::plan {

int64_t ModelSpec::params() const {
  return std::accumulate(units.begin(), units.end(), int64_t{0},
                         [](int64_t sum, const PlanUnit& u) { return sum + u.params(); });
}

bool ModelSpec::tensor_degree_ok(int64_t t) const {
  if (t < 1) return false;
  for (int64_t width : split_widths)
    if (width % t != 0) return false;
  return true;
}

ModelSpec mlp_spec(const std::vector<int64_t>& sizes) {
  LOOM_CHECK(sizes.size() >= 2, "plan: an mlp needs at least two feature sizes (input and output), got ", sizes.size());
  for (int64_t s : sizes) LOOM_CHECK(s > 0, "plan: mlp feature sizes must be positive, got ", s);
  ModelSpec spec;
  spec.description = "mlp";
  for (size_t i = 0; i < sizes.size(); ++i) spec.description += (i ? "-" : " ") + std::to_string(sizes[i]);
  const size_t linears = sizes.size() - 1;
  for (size_t j = 0; j < linears; ++j) {
    const int64_t in = sizes[j], out = sizes[j + 1];
    // split_linear_layers: column, row, column, ...; an odd last column layer gathers its output.
    const bool column = j % 2 == 0;
    const bool gathered_last = column && j + 1 == linears;
    PlanUnit linear{.name = std::to_string(2 * j), .param_tensors = 2, .output_elements = out};
    if (column) {
      linear.params_split = in * out + out;
      linear.act_split = static_cast<double>(out);
      // f's backward sums the input's gradient; the data (layer 0's input) has none.
      if (j > 0) linear.tp_backward_all_reduce = in;
      if (gathered_last) {
        linear.tp_forward_all_gather = out;
        linear.act_replicated = static_cast<double>(out);
      }
      spec.split_widths.push_back(out);
    } else {
      linear.params_split = in * out;
      linear.params_replicated = out;
      linear.act_replicated = static_cast<double>(out);
      linear.tp_forward_all_reduce = out;
      spec.split_widths.push_back(in);
    }
    spec.units.push_back(linear);
    if (j + 1 < linears) {
      // ReLU keeps its output, split as the Linear's before it.
      PlanUnit relu{.name = std::to_string(2 * j + 1), .output_elements = out};
      (column ? relu.act_split : relu.act_replicated) = static_cast<double>(out);
      spec.units.push_back(relu);
    }
  }
  // cross_entropy keeps the softmax of the logits for backward.
  spec.units.back().act_replicated += static_cast<double>(sizes.back());
  spec.input_bytes_per_sample = sizes.front() * 4;
  spec.target_bytes_per_sample = 8;
  spec.flops_per_sample = 6.0 * static_cast<double>(spec.params());
  return spec;
}

ModelSpec gpt_spec(const GptSizes& g) {
  LOOM_CHECK(g.layers > 0 && g.d_model > 0 && g.heads > 0 && g.vocab > 0 && g.context > 0,
             "plan: gpt sizes must be positive, got layers ", g.layers, ", d_model ", g.d_model, ", heads ", g.heads,
             ", vocab ", g.vocab, ", context ", g.context);
  LOOM_CHECK(g.d_model % g.heads == 0, "plan: gpt heads (", g.heads, ") must divide d_model (", g.d_model, ")");
  const int64_t h = g.d_model, s = g.context, a = g.heads, v = g.vocab;
  ModelSpec spec;
  spec.description = "gpt " + std::to_string(g.layers) + " layers, d_model " + std::to_string(h) + ", " +
                     std::to_string(a) + " heads, vocab " + std::to_string(v) + ", context " + std::to_string(s);
  // Token embedding split by vocabulary rows (vocab-parallel: one all-reduce of [s, h] forward),
  // position embedding whole.
  spec.units.push_back(PlanUnit{.name = "embeddings",
                                .params_split = v * h,
                                .params_replicated = s * h,
                                .param_tensors = 2,
                                .act_replicated = static_cast<double>(s * h),
                                .output_elements = s * h,
                                .tp_forward_all_reduce = s * h});
  for (int64_t l = 0; l < g.layers; ++l) {
    // qkv (weight and bias), proj weight, mlp.0 (weight and bias), mlp.2 weight are split; the
    // two LayerNorms and the row-parallel biases of proj and mlp.2 are whole: 12h^2 + 13h.
    spec.units.push_back(PlanUnit{.name = "block " + std::to_string(l),
                                  .params_split = 12 * h * h + 7 * h,
                                  .params_replicated = 6 * h,
                                  .param_tensors = 12,
                                  .act_split = static_cast<double>(s * 12 * h + 2 * a * s * s),
                                  .act_replicated = static_cast<double>(s * 4 * h),
                                  .output_elements = s * h,
                                  .tp_forward_all_reduce = 2 * s * h,
                                  .tp_backward_all_reduce = 2 * s * h});
  }
  // Final LayerNorm, then the head (tied: the embedding's weight; no parameters of its own) and
  // the loss, which keep the logits and their softmax, split by vocabulary under tensor
  // parallelism; the vocab-parallel loss all-reduces three numbers per token, the head's input
  // gradient is all-reduced in backward.
  spec.units.push_back(PlanUnit{.name = "head",
                                .params_split = g.tie_weights ? 0 : v * h,
                                .params_replicated = 2 * h,
                                .param_tensors = g.tie_weights ? 2 : 3,
                                .act_split = static_cast<double>(2 * s * v),
                                .act_replicated = static_cast<double>(2 * s * h),
                                .output_elements = s * v,
                                .tp_forward_all_reduce = 3 * s,
                                .tp_backward_all_reduce = s * h});
  spec.input_bytes_per_sample = s * 8;
  spec.target_bytes_per_sample = s * 8;
  if (g.tie_weights) spec.tied_split = v * h;
  spec.split_widths = {a, h};  // the vocabulary is padded to a multiple of t (Megatron pads it)
  // 6 flops per parameter and token (forward 2, backward 4), plus attention's QK^T and AV:
  // 12 · layers · s · h per token (Kaplan et al. 2020, table 1, forward and backward).
  spec.flops_per_sample = static_cast<double>(s) * (6.0 * static_cast<double>(spec.params()) +
                                                    12.0 * static_cast<double>(g.layers * s * h));
  return spec;
}

GptSizes gpt2_sizes(const std::string& name) {
  // Radford et al. 2019, table 2; vocabulary 50257, context 1024.
  if (name == "gpt2") return {.layers = 12, .d_model = 768, .heads = 12, .vocab = 50257, .context = 1024};
  if (name == "gpt2-medium") return {.layers = 24, .d_model = 1024, .heads = 16, .vocab = 50257, .context = 1024};
  if (name == "gpt2-large") return {.layers = 36, .d_model = 1280, .heads = 20, .vocab = 50257, .context = 1024};
  if (name == "gpt2-xl") return {.layers = 48, .d_model = 1600, .heads = 25, .vocab = 50257, .context = 1024};
  LOOM_FAIL("plan: unknown preset '", name, "'; known: gpt2, gpt2-medium, gpt2-large, gpt2-xl");
}

}  // namespace loom::distributed::plan
