/*
 * Activation checkpointing on a deep MLP: the same gradients as without it (dropout masks
 * included, thanks to the replayed random state), and far fewer bytes of saved activations,
 * measured on the graph.
 */
#include "core/autocast.h"
#include "tests/autograd/autograd_test_util.h"

using namespace loom;
using namespace loom::test;

namespace {

constexpr int kLayers = 16;
constexpr int64_t kBatch = 32, kWidth = 64;

struct Mlp {
  std::vector<Tensor> weights, biases;
  explicit Mlp(uint64_t seed) {
    Generator gen(seed);
    for (int i = 0; i < kLayers; ++i) {
      weights.push_back((randn({kWidth, kWidth}, kFloat32, &gen) * (1.0 / 8)).requires_grad_());
      biases.push_back((randn({kWidth}, kFloat32, &gen) * 0.1).requires_grad_());
    }
  }
  Tensor layer(int i, const Tensor& x) const {
    return dropout((x.matmul(weights[i]) + biases[i]).tanh(), 0.1, /*training=*/true);
  }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> p(weights);
    p.insert(p.end(), biases.begin(), biases.end());
    return p;
  }
};

// Runs the MLP (checkpointing every layer when asked) and returns the loss.
Tensor forward(const Mlp& mlp, const Tensor& input, bool checkpointed) {
  Tensor h = input;
  for (int i = 0; i < kLayers; ++i) {
    if (checkpointed)
      h = autograd::checkpoint([&mlp, i](const Tensor& x) { return mlp.layer(i, x); }, h);
    else
      h = mlp.layer(i, h);
  }
  return (h * h).mean();
}

}  // namespace

TEST_CASE("checkpointing gives the same gradients with far fewer saved bytes") {
  Mlp plain(7), checkpointed(7);
  Tensor input = randn({kBatch, kWidth}, kFloat32).requires_grad_();
  Tensor input2 = input.detach().clone().requires_grad_();

  manual_seed(123);
  Tensor loss_plain = forward(plain, input, false);
  size_t plain_bytes = autograd::graph_stats({loss_plain}).saved_bytes;
  loss_plain.backward();

  manual_seed(123);
  Tensor loss_ckpt = forward(checkpointed, input2, true);
  size_t ckpt_bytes = autograd::graph_stats({loss_ckpt}).saved_bytes;
  loss_ckpt.backward();

  CHECK(loss_plain.item<float>() == loss_ckpt.item<float>());
  // Identical arithmetic in the same order: bit-identical gradients.
  for (size_t i = 0; i < plain.parameters().size(); ++i)
    CHECK(equal(plain.parameters()[i].grad(), checkpointed.parameters()[i].grad()));
  CHECK(equal(input.grad(), input2.grad()));

  MESSAGE("saved activations for a ", kLayers, "-layer MLP, batch ", kBatch, ", width ", kWidth, ": ", plain_bytes,
          " bytes without checkpointing, ", ckpt_bytes, " bytes with it (", double(plain_bytes) / double(ckpt_bytes),
          "x less)");
  // Without: every layer keeps its input, pre-activation output, dropout mask and weights.
  // With: one input per layer (the weights are not saved by the graph at all).
  CHECK(ckpt_bytes * 4 < plain_bytes);
  CHECK(ckpt_bytes <= static_cast<size_t>(kLayers + 1) * kBatch * kWidth * sizeof(float) + 4096);
}

TEST_CASE("checkpoint replays dropout: the recomputed mask is the forward's, later draws are unchanged") {
  Tensor x = ones({1000}).requires_grad_();
  manual_seed(5);
  Tensor y = autograd::checkpoint([](const Tensor& t) { return dropout(t, 0.5, true); }, x);
  Tensor after_forward = rand({4});
  manual_seed(5);
  (void)dropout(ones({1000}), 0.5, true);
  Tensor expected_after = rand({4});
  CHECK(equal(after_forward, expected_after));

  Tensor mask_forward = y.ne(0);
  // Backward replays seed 5's numbers but must give the generator back as it found it.
  manual_seed(99);
  Tensor reference_next = rand({4});
  manual_seed(99);
  y.sum().backward();
  CHECK(equal(rand({4}), reference_next));
  // The gradient is 2 exactly where the forward kept an element, 0 elsewhere.
  CHECK(equal(x.grad().ne(0), mask_forward));
  CHECK(allclose(x.grad().sum(), (mask_forward.to(kFloat32) * 2.0).sum()));
}

TEST_CASE("checkpoint refuses a function that returns its input, and runs plainly under no_grad") {
  Tensor x = ones({3}).requires_grad_();
  CHECK_THROWS_WITH_AS(autograd::checkpoint([](const Tensor& t) { return t; }, x),
                       doctest::Contains("shares memory with an input"), Error);
  NoGradGuard guard;
  CHECK_FALSE(autograd::checkpoint([](const Tensor& t) { return t * 2.0; }, x).requires_grad());
}

TEST_CASE("a checkpoint whose input was modified in place refuses to recompute") {
  Tensor x = ones({3}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = autograd::checkpoint([](const Tensor& t) { return t.exp(); }, h);
  h.add_(1.0);
  CHECK_THROWS_WITH_AS(y.sum().backward(), doctest::Contains("modified by an inplace operation"), Error);
}

TEST_CASE("checkpoint recomputes under the forward's autocast state, not backward's") {
  manual_seed(7);
  Tensor w = randn({16, 8}).requires_grad_(), x = randn({4, 8});
  auto block = [&w](const Tensor& t) { return linear(t, w).relu(); };
  auto grad_of = [&](bool checkpointed) {
    w.mutable_grad() = Tensor();
    Tensor y;
    {
      AutocastGuard bf16(DeviceType::CPU, DType::BFloat16);
      y = checkpointed ? autograd::checkpoint(block, x) : block(x);
    }
    CHECK(y.dtype() == DType::BFloat16);
    y.to(kFloat32).sum().backward();
    return w.grad();
  };
  Tensor plain = grad_of(false), recomputed = grad_of(true);
  // Bitwise: the recompute must run the same bf16 kernels as the forward did.
  CHECK(plain.to_vector<float>() == recomputed.to_vector<float>());
  CHECK_FALSE(AutocastMode::any_enabled());
}
