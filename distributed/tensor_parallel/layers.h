/*
 * Megatron-style tensor-parallel linear layers: one weight matrix split over the ranks of a
 * tensor-parallel group, each rank computing its part (Shoeybi et al. 2019, figure 3).
 *
 *   ColumnParallelLinear  Y = X A,  A = [A_0 | A_1 | ... ] split by output features (columns of
 *                         A, rows of the [out, in] weight): rank i computes Y_i = X A_i.
 *                         forward: f(X) (identity), then X A_i (+ b_i);  optional gather of Y.
 *   RowParallelLinear     Y = X B,  B split by input features: rank i holds B_i and the matching
 *                         columns X_i of its input, computes X_i B_i, and the partial products
 *                         are summed: Y = g(Σ_i X_i B_i) + b.
 *
 * A column layer followed by a row layer (the transformer MLP: Y = GeLU(X A) B) needs no
 * communication in between, because the column layer's output is already split the way the row
 * layer's input must be. So one MLP costs one all-reduce in forward (g, at the end) and one in
 * backward (f's conjugate, at the start):
 *
 *        X ─ f ─┬─ X A_0 ─ GeLU ─ · B_0 ─┬─ g ─ Y          f: identity / all-reduce
 *               └─ X A_1 ─ GeLU ─ · B_1 ─┘                 g: all-reduce / identity
 *
 * Per step and rank, each all-reduce moves 2 (t-1)/t of the [batch, out] activation in a ring.
 *
 * Initialisation: each layer draws the *whole* weight as nn::Linear would and keeps its shard, so
 * that with the same seed on every rank a tensor-parallel model starts from exactly the weights
 * of the single-process model, whatever the degree; that is what the equivalence tests rely on.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "nn/layers/linear.h"
#include "nn/module.h"

namespace loom::distributed {

class ColumnParallelLinear : public nn::Module {
 public:
  // weight [out / t, in], bias [out / t], t = group->size(). gather_output: forward returns the
  // full [*, out] on every rank (an all-gather) instead of this rank's [*, out / t].
  // Throws loom::Error for a null group or t not dividing out_features.
  ColumnParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                       bool bias = true, bool gather_output = false);
  // This rank's rows of a given full weight [out, in] and bias [out] (undefined: none), e.g. a
  // trained nn::Linear's.
  ColumnParallelLinear(const Tensor& full_weight, const Tensor& full_bias, std::shared_ptr<ProcessGroup> group,
                       bool gather_output = false);
  ColumnParallelLinear(const nn::Linear& full, std::shared_ptr<ProcessGroup> group, bool gather_output = false);
  // x: [*, in] (the same on every rank of the group) -> [*, out / t] or [*, out].
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;

 private:
  int64_t in_, out_;
  std::shared_ptr<ProcessGroup> group_;
  bool gather_output_;
};

class RowParallelLinear : public nn::Module {
 public:
  // weight [out, in / t], bias [out] (whole on every rank, added once after the sum).
  // input_is_parallel: forward receives this rank's [*, in / t] (from a column layer); otherwise
  // it receives the full [*, in] and takes its columns. Throws for a null group or t not dividing
  // in_features.
  RowParallelLinear(int64_t in_features, int64_t out_features, std::shared_ptr<ProcessGroup> group,
                    bool bias = true, bool input_is_parallel = true);
  // This rank's columns of a given full weight [out, in], and the whole bias [out] (or none).
  RowParallelLinear(const Tensor& full_weight, const Tensor& full_bias, std::shared_ptr<ProcessGroup> group,
                    bool input_is_parallel = true);
  RowParallelLinear(const nn::Linear& full, std::shared_ptr<ProcessGroup> group, bool input_is_parallel = true);
  // -> [*, out], the same on every rank of the group.
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  Tensor weight, bias;

 private:
  int64_t in_, out_;
  std::shared_ptr<ProcessGroup> group_;
  bool input_is_parallel_;
};

}  // namespace loom::distributed
