/*
 * The vocabulary split over the world (t = 2 or 4): the embedding against nn::Embedding, and the
 * cross entropy against nn::functional::cross_entropy on the full logits (every rank builds the
 * full reference from the same seed and keeps its columns), loss and gradients.
 */
#include <doctest/doctest.h>

#include "autograd/autograd.h"
#include "core/random.h"
#include "distributed/tensor_parallel/vocab_parallel.h"
#include "nn/layers/embedding.h"
#include "nn/loss.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

double max_diff(const Tensor& a, const Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST_CASE("vocab-parallel embedding: the same lookups and weight gradients as nn::Embedding") {
  const int t = world()->size(), r = world()->rank();
  const int64_t vocab = 4 * t, dim = 3, n = vocab / t;
  manual_seed(3);
  nn::Embedding ref(vocab, dim);
  manual_seed(3);
  VocabParallelEmbedding emb(vocab, dim, world());
  CHECK(max_diff(emb.weight, ref.weight.slice(0, r * n, (r + 1) * n)) == 0.0);
  Tensor idx = tensor<int64_t>({0, vocab - 1, 2, 2, n, 1}, {2, 3});
  Tensor got = emb(idx), expected = ref(idx);
  CHECK(max_diff(got, expected) == 0.0);
  Tensor w = arange(2 * 3 * dim).to(kFloat32).reshape({2, 3, dim});
  (got * w).sum().backward();
  (expected * w).sum().backward();
  CHECK(max_diff(emb.weight.grad(), ref.weight.grad().slice(0, r * n, (r + 1) * n)) == 0.0);
  CHECK(test::error_of([&] { emb(tensor<int64_t>({vocab})); }).find("[0, " + std::to_string(vocab) + ")") !=
        std::string::npos);
}

TEST_CASE("vocab-parallel cross entropy: the loss and logit gradients of the full-vocabulary cross entropy") {
  const int t = world()->size(), r = world()->rank();
  const int64_t vocab = 5 * t, n = vocab / t, batch = 7;
  Generator g(9);
  Tensor full_logits = (randn({batch, vocab}, kFloat32, &g) * 3.0).requires_grad_(true);
  Tensor target = randint(0, vocab, {batch}, DType::Int64, &g);
  Tensor local = full_logits.detach().slice(1, r * n, (r + 1) * n).contiguous().requires_grad_(true);
  Tensor loss = vocab_parallel_cross_entropy(local, target, world());
  Tensor expected = nn::functional::cross_entropy(full_logits, target);
  CHECK(std::abs(loss.item<double>() - expected.item<double>()) < 1e-5);
  loss.backward();
  expected.backward();
  CHECK(max_diff(local.grad(), full_logits.grad().slice(1, r * n, (r + 1) * n)) < 1e-6);
  Tensor bad = target.clone();
  bad.select(0, 3).fill_(vocab);
  CHECK(test::error_of([&] { vocab_parallel_cross_entropy(local, bad, world()); }).find("targets must lie") !=
        std::string::npos);
  CHECK(test::error_of([&] { vocab_parallel_cross_entropy(local, target.slice(0, 0, 3), world()); })
            .find("expected an int64 target [7]") != std::string::npos);
}

}  // namespace
}  // namespace loom::distributed
