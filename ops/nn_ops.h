/*
 * Softmax, losses and the other functional building blocks of networks.
 * Reductions of losses: Reduction::Mean (default), Sum or None, as torch.nn.functional.
 */
#pragma once

#include "core/random.h"
#include "core/tensor.h"
#include "ops/kernel_types.h"

namespace loom {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad_out, const Tensor& out, int64_t dim);

// logits [N, C] (or [N, C, d1, ...] / [C]), target int64 class indices [N] (or [N, d1, ...] / []).
// Label smoothing eps mixes the one-hot target with the uniform distribution (PyTorch's rule);
// targets equal to ignore_index contribute nothing and are left out of the mean.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = {},
                     int64_t ignore_index = -100, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::Mean);
Tensor nll_loss(const Tensor& logp, const Tensor& target, const Tensor& weight = {}, int64_t ignore_index = -100,
                Reduction reduction = Reduction::Mean);
// out and total_weight (the normaliser of the mean), for autograd
std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor& logp, const Tensor& target, const Tensor& weight,
                                            int64_t ignore_index, Reduction reduction);
Tensor nll_loss_backward(const Tensor& grad_out, const Tensor& logp, const Tensor& target, const Tensor& weight,
                         const Tensor& total_weight, int64_t ignore_index, Reduction reduction);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);

// weight [num_embeddings, D], indices int64 of any shape -> [*indices.shape, D]
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor embedding_backward(const Tensor& grad_out, const Tensor& indices, int64_t num_embeddings);

// Zeroes each element with probability p and scales the rest by 1/(1-p) when training.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);

// int64 [*] -> int64 [*, num_classes] (num_classes = max + 1 when negative)
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);

}  // namespace loom
