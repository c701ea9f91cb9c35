/*
 * What the parallelism planner (planner.h) needs to know about a model, without building it:
 * its layers ("units": a Linear, an activation, a transformer block, the embeddings, the head),
 * each with its parameters, the activations it keeps for backward, and the tensor-parallel
 * collectives it makes, all per sample and in elements. GPT-2 1.5B is described in microseconds
 * here, where building it would take 6 GB.
 *
 * The numbers follow what Loom's own layers do (checked against measured runs in
 * tests/distributed/test_plan.cpp for the MLP):
 *   mlp   nn::MLP; under tensor parallelism split_linear_layers' column/row alternation
 *         (tensor_parallel/split_model.h): a column layer holds out/t rows and its bias
 *         shard, a row layer in/t columns and the whole bias; a row layer all-reduces its
 *         output in forward, a column layer all-reduces its input's gradient in backward
 *         (not the first: the data needs no gradient), an odd last column layer all-gathers.
 *   gpt   nn::GPT (pre-LN, tied head); activations per token and layer as Korthikanti et al.
 *         2022 ("Reducing Activation Recomputation in Large Transformer Models", eq. 2) without
 *         dropout masks: 16h elements + 2as (attention scores and their softmax), with tensor
 *         parallelism 4h + 12h/t + 2as/t; Megatron's 2 all-reduces of [tokens, h] per block in
 *         forward and 2 in backward.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::distributed::plan {

// One layer of the model. "Per sample" is per example for the mlp and per sequence for the gpt.
struct PlanUnit {
  std::string name;
  int64_t params_split = 0;       // divided over the tensor-parallel ranks (given here whole)
  int64_t params_replicated = 0;  // held whole by every tensor-parallel rank
  int64_t param_tensors = 0;      // how many parameter tensors (Adam keeps a step count for each)
  // Elements per sample the unit keeps for backward, as a function of the tensor degree t:
  // act_split / t + act_replicated.
  double act_split = 0, act_replicated = 0;
  int64_t output_elements = 0;  // per sample: what a pipeline stage sends on, what checkpointing keeps
  // Tensor-parallel collectives per sample, in elements of the full tensor: all-reduces in
  // forward and backward, and an all-gather's output in forward.
  int64_t tp_forward_all_reduce = 0, tp_backward_all_reduce = 0, tp_forward_all_gather = 0;

  int64_t params() const { return params_split + params_replicated; }
};

struct ModelSpec {
  std::string description;  // "mlp 784-512-512-10", "gpt 48 layers d 1600 ..."
  std::vector<PlanUnit> units;
  int64_t input_bytes_per_sample = 0;   // the batch as the first stage reads it
  int64_t target_bytes_per_sample = 0;  // the labels as the last stage reads them
  // The widths a tensor-parallel split cuts (the mlp's split layer widths; the gpt's heads and
  // d_model): a tensor degree must divide each.
  std::vector<int64_t> split_widths;
  double flops_per_sample = 0;  // forward and backward: 6 per parameter and token (+ attention)
  // A weight the first and last units share (the gpt's tied head: the token embedding, split
  // over the tensor ranks): pipelined, the last stage holds a copy and every stage all-reduces
  // its gradient over the pipeline group (gradient_sync.h, sum_tied_gradient). 0: none.
  int64_t tied_split = 0;

  int64_t params() const;
  bool tensor_degree_ok(int64_t t) const;
};

// nn::MLP with these feature sizes, input to output (at least two, all positive), ReLU between
// the Linear layers. Throws loom::Error naming a bad size.
ModelSpec mlp_spec(const std::vector<int64_t>& sizes);

struct GptSizes {
  int64_t layers = 4, d_model = 128, heads = 4, vocab = 65, context = 64;
  bool tie_weights = true;
};
// nn::GPT (gpt.h) with these sizes; a sample is one sequence of `context` tokens. Throws
// loom::Error for non-positive sizes or heads not dividing d_model.
ModelSpec gpt_spec(const GptSizes& sizes);
// GPT-2's published sizes: "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl" (1.5B); throws
// loom::Error naming the known ones for another name.
GptSizes gpt2_sizes(const std::string& name);

}  // namespace loom::distributed::plan
