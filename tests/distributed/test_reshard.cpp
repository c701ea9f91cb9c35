/*
 * distributed/reshard.h: the training state of one layout gathered whole and cut into another,
 * bit for bit, run under mpirun with 2 and 4 ranks.
 *
 *   - ZeRO: every rank trains a ZeroOptimizer (stage 1 and 2) over the world, the job saves a
 *     group checkpoint, every rank reads all of it back (load_latest_parts) and gathers the whole
 *     state: the model equals every replica, each shard's moments sit at their flat offsets; the
 *     whole state cut for 1, 2, 3 and 4 replicas and gathered back is the same bits, cut for the
 *     saving layout it is every rank's own sections again, and it loads into a whole optimizer;
 *     replicas with one layout are read once (the others' files may be gone).
 *   - Tensor and pipeline parallelism: an mlp split over the world as a tensor-parallel group,
 *     trained a step; its gathered model equals gather_full_state_dict's, the round trip through
 *     one process and through two pipeline stages gives back every rank's sections.
 *   - Layouts that cannot be mapped fail, naming the tensor and the reason; the layout's JSON
 *     round-trips; the loader's batch moves to the same number of examples read.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "distributed/pipeline/pipeline.h"
#include "distributed/reshard.h"
#include "distributed/tensor_parallel/split_model.h"
#include "distributed/zero.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"

namespace loom::distributed {
namespace {

using test::world;

bool bitwise_equal(const nn::StateDict& a, const nn::StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [name, t] : a) {
    const Tensor* other = b.find(name);
    if (!other) return false;
    Tensor x = t.contiguous(), y = other->contiguous();
    if (x.dtype() != y.dtype() || x.sizes() != y.sizes() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) != 0)
      return false;
  }
  return true;
}

// 7 -> 5 -> 3: 58 parameters, divisible by neither 3 nor 4 (the last ZeRO shard is short).
std::shared_ptr<nn::Sequential> small_mlp() {
  manual_seed(11);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(7, 5), std::make_shared<nn::Tanh>(),
                                          std::make_shared<nn::Linear>(5, 3));
}

std::unique_ptr<nn::Optimizer> adamw(std::vector<Tensor> params) {
  return std::make_unique<nn::AdamW>(std::move(params), nn::AdamWOptions{.lr = 1e-2, .weight_decay = 0.1});
}

// This rank's loss on its own batch.
Tensor loss_on_rank_batch(nn::Module& model, int64_t in) {
  manual_seed(100 + static_cast<uint64_t>(world()->rank()));
  return model(randn({4, in})).pow(2).mean();
}

// ZeroOptimizer's shard of `n` replicas, for rank r: [r S, (r + 1) S) of numel, S = ceil(numel / n).
std::pair<int64_t, int64_t> zero_shard(int64_t numel, int64_t n, int64_t r) {
  const int64_t s = (numel + n - 1) / n, begin = std::min(numel, s * r);
  return {begin, std::min(numel, begin + s)};
}

// The same directory name on every rank (their parent is mpirun), apart for concurrent jobs.
std::filesystem::path job_dir(const std::string& what) {
  return std::filesystem::temp_directory_path() /
         ("loom-test-reshard-" + what + "-" + std::to_string(::getppid()) + "-" +
          std::to_string(world()->size()));
}

nn::CheckpointGroup world_checkpoint_group() {
  return nn::CheckpointGroup{.rank = world()->rank(), .size = world()->size(), .all_ok = [](bool ok) {
                               Tensor flag = scalar_tensor(ok ? 0.0 : 1.0, kFloat64).reshape({1});
                               world()->all_reduce(flag, ReduceOp::Max);  // waits for every rank's flag
                               return flag.item<double>() == 0.0;
                             }};
}

// Saves this rank's sections and layout as one group checkpoint; every rank finds all of it.
// The files stay until remove_job_dir(what).
nn::CheckpointParts save_and_find(const std::string& what, const RankTrainingState& mine,
                                  const RankLayout& layout) {
  const std::filesystem::path dir = job_dir(what);
  if (world()->rank() == 0) std::filesystem::remove_all(dir);
  world()->barrier();  // no rank saves before the old directory is gone
  nn::CheckpointManager manager(dir, 1, world_checkpoint_group());
  const std::string meta =
      std::string("{\"") + kLayoutMetadataKey + "\": " + rank_layout_to_json(layout) + "}";
  manager.save(3, {{"model", mine.model}, {"optimizer", mine.optimizer}}, meta);
  std::optional<nn::CheckpointParts> parts = manager.load_latest_parts();
  REQUIRE(parts.has_value());
  CHECK(parts->ranks() == world()->size());
  return *parts;
}

void remove_job_dir(const std::string& what) {
  world()->barrier();  // every rank read what it needed before rank 0 removes it
  if (world()->rank() == 0) std::filesystem::remove_all(job_dir(what));
}

std::vector<RankLayout> layouts_of(const nn::CheckpointParts& parts) {
  std::vector<RankLayout> layouts;
  for (const std::string& meta : parts.rank_metadata) layouts.push_back(rank_layout_from_metadata(meta));
  return layouts;
}

std::vector<RankTrainingState> sections_of(const nn::CheckpointParts& parts) {
  std::vector<RankTrainingState> ranks;
  for (int r = 0; r < parts.ranks(); ++r) {
    const auto sections = parts.load_rank(r);
    ranks.push_back({sections.at("model"), sections.at("optimizer")});
  }
  return ranks;
}

// The whole state cut for every rank of `layouts` and gathered back.
FullTrainingState round_trip(const FullTrainingState& full, const std::vector<RankLayout>& layouts,
                             const FullShapes& shapes) {
  std::vector<RankTrainingState> ranks;
  for (const RankLayout& layout : layouts) ranks.push_back(scatter_training_state(full, layout));
  return gather_training_state(layouts, ranks, shapes);
}

TEST_CASE("a ZeRO checkpoint reshards to 1, 2, 3 and 4 replicas and back, bit for bit") {
  for (int stage : {1, 2}) {
    CAPTURE(stage);
    auto model = small_mlp();
    ZeroOptimizer zero(model->parameters(), world(), stage, adamw);
    for (int step = 0; step < 2; ++step) {
      loss_on_rank_batch(*model, 7).backward();
      zero.step();
      zero.zero_grad();
    }
    const RankLayout mine = rank_layout(*model, {}, std::pair{zero.shard_begin(), zero.shard_end()});
    const RankTrainingState own{model->state_dict(), zero.inner().state_dict()};
    const std::string what = "zero" + std::to_string(stage);
    const nn::CheckpointParts parts = save_and_find(what, own, mine);
    const FullShapes shapes = full_shapes_of(*model);
    const std::vector<RankLayout> saved = layouts_of(parts);
    const FullTrainingState full = gather_training_state(saved, sections_of(parts), shapes);
    const RankTrainingState resharded = reshard_checkpoint(parts, mine, shapes);  // reads the files again
    CHECK(bitwise_equal(resharded.model, own.model));
    CHECK(bitwise_equal(resharded.optimizer, own.optimizer));
    remove_job_dir(what);

    // The model is every replica; each shard's moments are at their offsets of the flat parameters.
    CHECK(bitwise_equal(full.model, model->state_dict()));
    int64_t offset = 0, view = 0;
    for (const auto& [name, p] : model->named_parameters()) {
      const int64_t lo = std::max(offset, zero.shard_begin()),
                    hi = std::min(offset + p.numel(), zero.shard_end());
      if (lo < hi) {
        const Tensor mine_avg = zero.inner().state_dict().at("state." + std::to_string(view) + ".exp_avg");
        const Tensor whole_avg =
            full.optimizer.at(name + ".exp_avg").reshape({-1}).slice(0, lo - offset, hi - offset);
        CHECK(bitwise_equal({{"x", mine_avg}}, {{"x", whole_avg.contiguous()}}));
        CHECK(full.optimizer.at(name + ".step").item<double>() == 2.0);
        ++view;
      }
      offset += p.numel();
    }

    // Other numbers of replicas and back: the same bits; the saving layout: every rank's sections.
    for (int64_t n : {1, 2, 3, 4}) {
      CAPTURE(n);
      std::vector<RankLayout> layouts;
      for (int64_t r = 0; r < n; ++r) layouts.push_back(rank_layout(*model, {}, zero_shard(offset, n, r)));
      const FullTrainingState back = round_trip(full, layouts, shapes);
      CHECK(bitwise_equal(back.model, full.model));
      CHECK(bitwise_equal(back.optimizer, full.optimizer));
    }
    const RankTrainingState again = scatter_training_state(full, mine);
    CHECK(bitwise_equal(again.model, own.model));
    CHECK(bitwise_equal(again.optimizer, own.optimizer));

    // One process: the whole optimizer's own format, which it loads and gives back.
    auto whole_model = small_mlp();
    const RankTrainingState whole = scatter_training_state(full, rank_layout(*whole_model, {}));
    whole_model->load_state_dict(whole.model);
    auto whole_optimizer = adamw(whole_model->parameters());
    whole_optimizer->load_state_dict(whole.optimizer);
    CHECK(bitwise_equal(whole_optimizer->state_dict(), whole.optimizer));

    // Every rank saving that whole state (replicas without ZeRO): the ranks above 0 hold the same
    // values under the same layout, so resharding reads rank 0's files alone; removing the others'
    // after the checkpoint was found complete shows it.
    const std::string replicas = what + "-replicas";
    const nn::CheckpointParts copies = save_and_find(replicas, whole, rank_layout(*whole_model, {}));
    world()->barrier();  // every rank found the checkpoint complete
    if (world()->rank() == 0)
      for (int r = 1; r < copies.ranks(); ++r) std::filesystem::remove(copies.files[r].at("model"));
    world()->barrier();  // before any rank reads
    const RankTrainingState from_rank_0 = reshard_checkpoint(copies, rank_layout(*whole_model, {}), shapes);
    CHECK(bitwise_equal(from_rank_0.model, whole.model));
    CHECK(bitwise_equal(from_rank_0.optimizer, whole.optimizer));
    remove_job_dir(replicas);
  }
}

// Linear layers at 0, 2, 4: 8 -> 8 -> 8 -> 4, every width divisible by 2 and 4.
std::shared_ptr<nn::Sequential> tensor_parallel_mlp() {
  manual_seed(5);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(8, 8), std::make_shared<nn::ReLU>(),
                                          std::make_shared<nn::Linear>(8, 4));
}

TEST_CASE(
    "a tensor-parallel checkpoint reshards to one process and to pipeline stages and back, bit for bit") {
  auto full_model = tensor_parallel_mlp();
  SplitSequential split = split_linear_layers(*full_model, world(), LastLinear::Gathered);
  auto optimizer = adamw(split.net->parameters());
  manual_seed(9);  // the same batch on every tensor rank
  (*split.net)(randn({4, 8})).pow(2).mean().backward();
  optimizer->step();

  const RankLayout mine = rank_layout(*split.net, split.placement);
  const RankTrainingState own{split.net->state_dict(), optimizer->state_dict()};
  const nn::CheckpointParts parts = save_and_find("tp", own, mine);
  const FullShapes shapes = full_shapes_of(*full_model);
  const FullTrainingState full = gather_training_state(layouts_of(parts), sections_of(parts), shapes);
  remove_job_dir("tp");

  // The library's other assembly of the pieces (an all-reduce over zeros) agrees bit for bit.
  CHECK(bitwise_equal(
      full.model, gather_full_state_dict(*full_model, own.model, split.placement.pieces, true, *world())));
  CHECK(bitwise_equal(scatter_training_state(full, mine).optimizer, own.optimizer));
  CHECK(bitwise_equal(scatter_training_state(full, mine).model, own.model));

  // One process, and two pipeline stages (layers [0, 3) and [3, 5), the second renamed from 0).
  const FullTrainingState whole = round_trip(full, {rank_layout(*full_model, {})}, shapes);
  CHECK(bitwise_equal(whole.model, full.model));
  CHECK(bitwise_equal(whole.optimizer, full.optimizer));
  ModelPlacement everything;
  for (const auto& [name, t] : full_model->named_parameters()) everything.add_whole(name, name, t, false, 0);
  std::vector<RankLayout> stages;
  for (auto [begin, end] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}})
    stages.push_back(rank_layout(*pipeline::stage_of(*full_model, begin, end), everything.stage(begin, end)));
  const FullTrainingState staged = round_trip(full, stages, shapes);
  CHECK(bitwise_equal(staged.model, full.model));
  CHECK(bitwise_equal(staged.optimizer, full.optimizer));
}

TEST_CASE("layouts that cannot be mapped fail, naming the tensor and the reason") {
  auto model = small_mlp();
  const RankLayout whole = rank_layout(*model, {});
  const FullShapes shapes = full_shapes_of(*model);
  const RankTrainingState one{model->state_dict(), adamw(model->parameters())->state_dict()};

  SUBCASE("another model size") {
    FullShapes bigger = shapes;
    bigger.at("0.weight") = {5, 8};
    CHECK_THROWS_WITH(gather_training_state({whole}, {one}, bigger),
                      doctest::Contains("which does not fit this model's 0.weight [5, 8]"));
  }
  SUBCASE("a tensor no rank holds") {
    RankLayout partial = whole;
    partial.parameters.back().pieces.front().length = 1;  // 2.bias: only its first element
    CHECK_THROWS_WITH(gather_training_state({partial}, {one}, shapes),
                      doctest::Contains("no saving rank holds all of 2.bias"));
  }
  SUBCASE("replicas whose step counts disagree") {
    auto trained = small_mlp();
    auto optimizer = adamw(trained->parameters());
    std::vector<RankTrainingState> replicas;
    for (int step = 0; step < 2; ++step) {
      (*trained)(randn({2, 7})).sum().backward();
      optimizer->step();
      optimizer->zero_grad();
      RankTrainingState now;
      for (const auto& [name, t] : trained->state_dict()) now.model.insert(name, t.clone());
      for (const auto& [name, t] : optimizer->state_dict()) now.optimizer.insert(name, t.clone());
      replicas.push_back(std::move(now));
    }
    CHECK_THROWS_WITH(
        gather_training_state({whole, whole}, replicas, shapes),
        doctest::Contains("step counts of 0.weight disagree: 1 on saving rank 0, 2 on saving rank 1"));
  }
  SUBCASE("a checkpoint without layouts") {
    CHECK_THROWS_WITH(rank_layout_from_metadata("{\"step\": 3}"), doctest::Contains("recorded no layout"));
  }
  SUBCASE("the layout's JSON round-trips; malformed JSON is refused") {
    RankLayout zero = whole;
    zero.zero_shard = std::pair<int64_t, int64_t>{3, 29};
    const RankLayout back = rank_layout_from_json(rank_layout_to_json(zero));
    CHECK(rank_layout_to_json(back) == rank_layout_to_json(zero));
    CHECK(back.zero_shard == zero.zero_shard);
    CHECK_THROWS_WITH(rank_layout_from_json("{\"parameters\": 3}"), doctest::Contains("malformed"));
  }
}

TEST_CASE("the loader resumes where as many of the epoch's examples were read") {
  CHECK(resharded_batch(3, 16, 8) == 6);   // dp 4 x 4 -> dp 2 x 4: twice the batches
  CHECK(resharded_batch(6, 8, 16) == 3);   // and back
  CHECK(resharded_batch(3, 8, 16) == 1);   // 24 examples read: batch 1 of 16 (8 read again)
  CHECK(resharded_batch(5, 16, 16) == 5);  // the same global batch: the same batch
  CHECK_THROWS_WITH(resharded_batch(1, 0, 8), doctest::Contains("resharded_batch"));
}

}  // namespace
}  // namespace loom::distributed
