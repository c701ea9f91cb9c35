/*
 * MLP: builds the Linear/activation chain and flattens image inputs (see mlp.h).
 */
#include "nn/models/mlp.h"

#include "nn/layers/activation.h"
#include "nn/layers/linear.h"

namespace loom::nn {

MLP::MLP(std::vector<int64_t> sizes, ActivationFactory activation) : sizes_(std::move(sizes)) {
  LOOM_CHECK(sizes_.size() >= 2, "MLP: expected at least two sizes (input and output features), got ",
             sizes_.size());
  for (size_t i = 0; i < sizes_.size(); ++i) {
    LOOM_CHECK(sizes_[i] > 0, "MLP: expected positive sizes, got ", sizes_[i], " at position ", i);
  }
  for (size_t i = 0; i + 1 < sizes_.size(); ++i) {
    push_back(std::make_shared<Linear>(sizes_[i], sizes_[i + 1]));
    if (i + 2 < sizes_.size()) {
      std::shared_ptr<Module> act = activation ? activation() : std::make_shared<ReLU>();
      LOOM_CHECK(act != nullptr, "MLP: the activation factory returned a null module");
      push_back(std::move(act));
    }
  }
}

Tensor MLP::forward(const Tensor& x) {
  LOOM_CHECK(x.defined(), "MLP: input is an undefined tensor");
  LOOM_CHECK(x.dim() >= 2, "MLP: expected input [N, ", sizes_.front(), "] or [N, *] (flattened), got shape ",
             x.sizes());
  int64_t features = 1;
  for (int64_t d = 1; d < x.dim(); ++d) features *= x.size(d);
  LOOM_CHECK(features == sizes_.front(), "MLP: expected ", sizes_.front(), " input features per sample, got ",
             features, " (input shape ", x.sizes(), ")");
  return Sequential::forward(x.dim() == 2 ? x : x.flatten(1));
}

}  // namespace loom::nn
