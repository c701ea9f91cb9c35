/*
 * Gradcheck cases of softmax, log_softmax and nll_loss, and of the composites written with
 * them and with the elementwise ops (cross_entropy with weights, ignore_index and label
 * smoothing in every reduction; mse_loss; embedding; dropout), each filed under a primitive
 * it records. Second order through the fused backward kernels, which have cases of their own.
 */
#include "tests/autograd/cases/gradcheck_case.h"

namespace loom::test {

namespace {

Tensor targets(const std::vector<double>& v, IntArrayRef shape) { return make(v, shape).to(kInt64); }

Tensor target_0dim(int64_t t) { return scalar_tensor(t, TensorOptions(kInt64)); }

Tensor class_weights() { return make({0.5, 2.0, 1.25}, {3}); }

Tensor weight_leaf() { return make({0.5, 2.0, 1.25}, {3}).requires_grad_(); }

constexpr Reduction kReductions[] = {Reduction::None, Reduction::Sum, Reduction::Mean};

}  // namespace

[[maybe_unused]] static RegisterCases nn_cases{{
    // ---- softmax / log_softmax ----------------------------------------------------------------------
    {Op::softmax, "softmax [3, 4] dims 0, 1 and -1", [] { return inputs(leaf({3, 4}, 4001)); },
     [](const Inputs& x) { return outputs(x[0].softmax(0), x[0].softmax(1) * x[0], x[0].softmax(-1)); }, kSecondOrder},
    {Op::softmax, "softmax [2, 3, 4] along the middle dim", [] { return inputs(leaf({2, 3, 4}, 4002)); },
     [](const Inputs& x) { return outputs(x[0].softmax(1)); }},
    {Op::softmax, "softmax of a transpose along dim 0 and of a view",
     [] { return inputs(transposed_leaf(3, 4, 4003)); },
     [](const Inputs& x) { return outputs(x[0].softmax(0), x[0].narrow(1, 1, 2).softmax(1)); }, kSecondOrder},
    {Op::softmax, "softmax of a 0-dim tensor (times x)",
     [] { return inputs(scalar_tensor(0.7, TensorOptions(kFloat64)).requires_grad_()); },
     [](const Inputs& x) { return outputs(x[0].softmax(0) * x[0]); }},
    {Op::log_softmax, "log_softmax [3, 4] dims 0, 1 and -1", [] { return inputs(leaf({3, 4}, 4011)); },
     [](const Inputs& x) {
       return outputs(x[0].log_softmax(0), x[0].log_softmax(1) * x[0], x[0].log_softmax(-1));
     }, kSecondOrder},
    {Op::log_softmax, "log_softmax [2, 3, 4] along the middle dim",
     [] { return inputs(leaf({2, 3, 4}, 4012, 3.0)); },
     [](const Inputs& x) { return outputs(x[0].log_softmax(1)); }},
    {Op::log_softmax, "log_softmax of a transpose and of a view",
     [] { return inputs(transposed_leaf(3, 4, 4013)); },
     [](const Inputs& x) { return outputs(x[0].log_softmax(1), x[0].narrow(0, 1, 2).log_softmax(0)); }, kSecondOrder},

    // ---- nll_loss ------------------------------------------------------------------------------------
    {Op::nll_loss, "nll_loss [4, 3] in each reduction", [] { return inputs(leaf({4, 3}, 4021)); },
     [](const Inputs& x) {
       Tensor t = targets({2, 0, 1, 2}, {4});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(nll_loss(x[0], t, {}, -100, r));
       return out;
     }},
    {Op::nll_loss, "nll_loss with class weights and ignore_index, each reduction",
     [] { return inputs(leaf({5, 3}, 4022)); },
     [](const Inputs& x) {
       Tensor t = targets({2, 1, 1, 0, 1}, {5});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(nll_loss(x[0], t, class_weights(), 0, r));
       return out;
     }, kSecondOrder},
    {Op::nll_loss, "nll_loss of a transpose, ignore_index -100 present",
     [] { return inputs(transposed_leaf(4, 3, 4023)); },
     [](const Inputs& x) { return outputs(nll_loss(x[0], targets({1, -100, 0, 2}, {4}))); }},
    {Op::nll_loss, "nll_loss [2, 3, 2] (K-dim) with weights, each reduction",
     [] { return inputs(leaf({2, 3, 2}, 4024)); },
     [](const Inputs& x) {
       Tensor t = targets({0, 2, 1, 1}, {2, 2});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(nll_loss(x[0], t, class_weights(), -100, r));
       return out;
     }},
    {Op::nll_loss, "nll_loss of one sample: [3] with a 0-dim target", [] { return inputs(leaf({3}, 4025)); },
     [](const Inputs& x) { return outputs(nll_loss(x[0], target_0dim(1)) * x[0]); }},
    {Op::nll_loss, "nll_loss gradient of learned class weights, each reduction",
     [] { return inputs(leaf({5, 3}, 4026), weight_leaf()); },
     [](const Inputs& x) {
       Tensor t = targets({2, 1, -1, 0, 1}, {5});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(nll_loss(x[0], t, x[1], -1, r));
       return out;
     }, kSecondOrder},
    {Op::nll_loss, "nll_loss gradient of learned class weights, K-dim and one sample",
     [] { return inputs(leaf({2, 3, 2}, 4027), leaf({3}, 4028), weight_leaf()); },
     [](const Inputs& x) {
       return outputs(nll_loss(x[0], targets({0, 2, 1, 1}, {2, 2}), x[2]),
                      nll_loss(x[1], target_0dim(2), x[2], -100, Reduction::Sum));
     }, kSecondOrder},

    // ---- the fused backward kernels (what a second derivative goes through) --------------------
    {Op::softmax_backward, "softmax_backward [3, 4] along dims 1 and 0 (any grad and output)",
     [] { return inputs(leaf({3, 4}, 4071), leaf({3, 4}, 4072, 0.5, 0.5)); },
     [](const Inputs& x) { return outputs(softmax_backward(x[0], x[1], 1), softmax_backward(x[0], x[1], 0)); },
     kSecondOrder},
    {Op::log_softmax_backward, "log_softmax_backward [2, 3, 2] along the middle dim, of a transpose",
     [] { return inputs(leaf({2, 3, 2}, 4073), transposed_leaf(3, 4, 4074)); },
     [](const Inputs& x) {
       return outputs(log_softmax_backward(x[0], x[0] - 1.0, 1), log_softmax_backward(x[1], x[1] * 0.5, 0));
     }, kSecondOrder},
    {Op::nll_loss_backward, "nll_loss_backward with learned weights and total, each reduction",
     [] { return inputs(leaf({5}, 4075), leaf({}, 4076), weight_leaf(), leaf({}, 4077, 0.5, 2.0)); },
     [](const Inputs& x) {
       Tensor logp = zeros({5, 3}, TensorOptions(kFloat64)), t = targets({2, 1, -1, 0, 1}, {5});
       return outputs(nll_loss_backward(x[0], logp, t, x[2], x[3], -1, Reduction::None),
                      nll_loss_backward(x[1], logp, t, x[2], x[3], -1, Reduction::Sum),
                      nll_loss_backward(x[1], logp, t, x[2], x[3], -1, Reduction::Mean) * x[1]);
     }, kSecondOrder},

    // ---- cross_entropy (log_softmax + nll_loss, label smoothing with elementwise ops) ----------------
    {Op::nll_loss, "cross_entropy [4, 3], each reduction", [] { return inputs(leaf({4, 3}, 4031)); },
     [](const Inputs& x) {
       Tensor t = targets({2, 0, 1, 2}, {4});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(cross_entropy(x[0], t, {}, -100, 0.0, r));
       return out;
     }, kSecondOrder},
    {Op::log_softmax, "cross_entropy with label smoothing 0.2, weights and ignore_index, each reduction",
     [] { return inputs(leaf({5, 3}, 4032)); },
     [](const Inputs& x) {
       Tensor t = targets({2, 1, 1, 0, 1}, {5});
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(cross_entropy(x[0], t, class_weights(), 0, 0.2, r));
       return out;
     }},
    {Op::nll_loss, "cross_entropy K-dim [2, 3, 2] of a permuted input with label smoothing",
     [] { return inputs(make(random_values(12, 4033), {2, 2, 3}).permute({0, 2, 1}).requires_grad_()); },
     [](const Inputs& x) {
       Tensor t = targets({0, 2, -100, 1}, {2, 2});
       return outputs(cross_entropy(x[0], t, {}, -100, 0.1),
                      cross_entropy(x[0], t, class_weights(), -100, 0.3, Reduction::Sum));
     }},
    {Op::nll_loss, "cross_entropy with learned class weights and label smoothing",
     [] { return inputs(leaf({5, 3}, 4034), weight_leaf()); },
     [](const Inputs& x) {
       Tensor t = targets({2, 1, 1, 0, 2}, {5});
       return outputs(cross_entropy(x[0], t, x[1], 1, 0.25), cross_entropy(x[0], t, x[1], -100, 0.0));
     }, kSecondOrder},

    // ---- other composites ----------------------------------------------------------------------------
    {Op::sub, "mse_loss with a broadcast target that requires grad, each reduction, second order",
     [] { return inputs(leaf({3, 4}, 4041), leaf({4}, 4042)); },
     [](const Inputs& x) {
       std::vector<Tensor> out;
       for (Reduction r : kReductions) out.push_back(mse_loss(x[0], x[1], r));
       return out;
     }, kSecondOrder},
    {Op::index_select, "embedding: gradient of the weight, repeated indices",
     [] { return inputs(leaf({5, 3}, 4051)); },
     [](const Inputs& x) { return outputs(embedding(x[0], targets({4, 0, 4, 2, 1, 4}, {2, 3})) * 2.0); }},
    {Op::mul, "dropout p = 0.4 with a seeded generator (the same mask every call)",
     [] { return inputs(leaf({4, 5}, 4061)); },
     [](const Inputs& x) {
       Generator gen(77);
       return outputs(dropout(x[0], 0.4, true, &gen) * x[0]);
     }, kSecondOrder},
}};

}  // namespace loom::test
