/*
 * distributed/tensor_parallel/split_model.h and distributed/shard_placement.h: a whole model
 * split over the world as a tensor-parallel group, its placements checked, and the whole state
 * dict gathered back from the pieces, bit for bit; a pipeline stage's placements renamed.
 */
#include <doctest/doctest.h>

#include <cstring>

#include "core/random.h"
#include "distributed/shard_placement.h"
#include "distributed/tensor_parallel/split_model.h"
#include "nn/layers/activation.h"
#include "nn/layers/linear.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/test_util.h"

namespace loom::distributed {
namespace {

using test::world;

// Linear layers at 0, 2, 4 (and 6 when `linears` is 4): 8 -> 16 -> ... -> 4.
std::shared_ptr<nn::Sequential> mlp(int linears) {
  manual_seed(3);
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 16));
  for (int i = 1; i < linears; ++i) {
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::Linear>(16, i + 1 == linears ? 4 : 16));
  }
  return net;
}

bool bitwise_equal(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.keys() != b.keys()) return false;
  for (const auto& [name, t] : a) {
    Tensor x = t.contiguous(), y = b.at(name).contiguous();
    if (x.sizes() != y.sizes() || std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0) return false;
  }
  return true;
}

std::set<std::string> unplaced(const ModelPlacement& placement) { return placement.replicated; }

TEST_CASE("split_linear_layers: column, row, ...; the same outputs; the whole model gathered back") {
  for (LastLinear last : {LastLinear::Gathered, LastLinear::Replicated})
    for (int linears : {3, 4}) {
      CAPTURE(linears);
      auto full = mlp(linears);
      SplitSequential split = split_linear_layers(*full, world(), last);
      REQUIRE(split.net->size() == full->size());
      CHECK(dynamic_cast<ColumnParallelLinear*>(split.net->ptr(0).get()) != nullptr);
      CHECK(dynamic_cast<RowParallelLinear*>(split.net->ptr(2).get()) != nullptr);
      const bool whole_last = linears == 3 && last == LastLinear::Replicated;
      CHECK((dynamic_cast<nn::Linear*>(split.net->ptr(4).get()) != nullptr) == whole_last);
      check_placements(*full, *split.net, split.placement.pieces, unplaced(split.placement));
      Generator g(5);
      const Tensor x = randn({3, 8}, kFloat32, &g);
      CHECK(((*split.net)(x) - (*full)(x)).abs().max().item<double>() < 1e-5);
      CHECK(bitwise_equal(gather_full_state_dict(*full, split.net->state_dict(), split.placement.pieces, true, *world()),
                          full->state_dict()));
    }
}

TEST_CASE("split_linear_layers names the layer the group does not divide") {
  const int n = world()->size();
  manual_seed(3);
  nn::Sequential odd(std::make_shared<nn::Linear>(8, 4 * n + 1));
  CHECK(test::error_of([&] { split_linear_layers(odd, world()); }).find("not divisible") != std::string::npos);
}

TEST_CASE("ModelPlacement::stage keeps a stage's parameters under the stage's names") {
  ModelPlacement placement;
  placement.pieces = {{"0.weight", "0.weight", 0, 0, 0, 2}, {"2.weight", "2.weight", 1, 4, 0, 4}};
  placement.replicated = {"2.bias", "4.bias"};
  const ModelPlacement stage = placement.stage(2, 4);
  REQUIRE(stage.pieces.size() == 1);
  CHECK(stage.pieces[0].local_name == "0.weight");
  CHECK(stage.pieces[0].full_name == "2.weight");
  CHECK(stage.replicated == std::set<std::string>{"0.bias"});
  CHECK(stage_parameter_name("12.weight", 10, 13) == "2.weight");
  CHECK(stage_parameter_name("12.weight", 0, 12).empty());
}

TEST_CASE("gpt_placement: a TensorParallelGPT's pieces assemble the nn::GPT bit for bit") {
  const int n = world()->size();
  manual_seed(9);
  nn::GPT full(nn::GPTConfig{.vocab_size = 8 * n, .context = 8, .n_layers = 2, .n_heads = 2 * n, .d_model = 8 * n});
  TensorParallelGPT split(full, world());
  const ModelPlacement placement = gpt_placement(split, world()->rank());
  check_placements(full, split, placement.pieces, placement.replicated);
  CHECK(bitwise_equal(gather_full_state_dict(full, split.state_dict(), placement.pieces, true, *world()),
                      full.state_dict()));
}

}  // namespace
}  // namespace loom::distributed
