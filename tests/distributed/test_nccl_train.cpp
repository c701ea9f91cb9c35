/*
 * `train --device cuda` with --dp / --tp / --pp / --zero (1, 2 and 3) under mpirun (2 and 4 ranks): the
 * model's tensors on each rank's GPU and every collective of the job over the NCCL group, the
 * job's own agreements (sums of metrics, checkpoint votes) over MPI.
 *
 * The reference is one process on the CPU with dp times the batch (test_train_dp.cpp explains
 * why that is the same computation), run by every rank into its own directory: every mesh must
 * end with its parameters and validation loss, up to float32 reassociation and the CUDA kernels'
 * rounding. A run stopped mid-epoch and resumed ends bit-identical to one never stopped, on CUDA
 * as on the CPU. The GPT runs split by --tp (vocabulary-parallel) and --pp (tied embedding).
 * In CI this runs on emulated GPUs and the stand-in NCCL
 * (distributed/nccl/emulated/nccl.h); skipped where there is no NCCL or no GPU per rank.
 */
#include <doctest/doctest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "data/data.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "tests/distributed/mpi_test_util.h"
#include "tests/distributed/train_test_util.h"
#include "tools/train/trainer.h"

using namespace loom;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kExamples = 64;  // a multiple of dp · batch for dp = 1, 2, 4 and batch 8
constexpr int64_t kBatch = 8;

struct Mesh {
  int64_t dp = 1, tp = 1, pp = 1, zero = 0;
  std::string name() const {
    return "dp" + std::to_string(dp) + "_tp" + std::to_string(tp) + "_pp" + std::to_string(pp) + "_zero" +
           std::to_string(zero);
  }
};

train::TrainOptions mlp_options(const fs::path& data, const fs::path& out, const Mesh& m, bool cuda) {
  train::TrainOptions o = test::mlp_train_options(data, out, "16,16", kBatch);  // column, row, column with --tp
  o.device = cuda ? train::DeviceKind::kCuda : train::DeviceKind::kCpu;
  o.dp = m.dp;
  o.tp = m.tp;
  o.pp = m.pp;
  o.zero = m.zero;
  if (m.pp > 1) o.microbatches = 2;
  return o;
}

train::TrainSummary run(const train::TrainOptions& o) {
  std::ostringstream log;
  return train::run_training(o, log, /*interactive=*/false);
}

// Whether every rank can train on its own GPU over NCCL (collective).
bool nccl_usable() {
  auto group = test::nccl_world_or_skip();
  return group && group->size() == test::world()->size();
}

}  // namespace

TEST_CASE("train --device cuda over NCCL: every mesh equals one CPU process with dp times the batch") {
  if (!nccl_usable()) return;
  auto world = test::world();
  const int n = world->size();
  fs::path dir = test::shared_scratch("nccl_train", "meshes");
  fs::path data = test::tiny_image_dataset(dir, "tiny.h5", kExamples, 4);
  std::vector<Mesh> meshes;
  if (n == 2) meshes = {{.dp = 2}, {.dp = 2, .zero = 2}, {.dp = 2, .zero = 3}, {.tp = 2}, {.pp = 2}};
  else meshes = {{.dp = 4, .zero = 1}, {.dp = 2, .tp = 2}, {.dp = 2, .pp = 2}};
  for (const Mesh& m : meshes) {
    CAPTURE(m.name());
    const fs::path ref_dir = dir / ("ref_" + m.name() + "_rank" + std::to_string(world->rank()));
    train::TrainOptions ref = mlp_options(data, ref_dir, Mesh{}, /*cuda=*/false);
    ref.batch = kBatch * m.dp;
    const train::TrainSummary expected = run(ref);
    const train::TrainSummary got = run(mlp_options(data, dir / m.name(), m, /*cuda=*/true));
    CHECK(got.steps == expected.steps);
    CHECK(test::excess(test::model_file(dir / m.name()), test::model_file(ref_dir), 1e-4, 1e-5) <= 0);
    REQUIRE(got.val_loss.has_value());
    CHECK(*got.val_loss == doctest::Approx(*expected.val_loss).epsilon(1e-4));
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --device cuda over NCCL: a GPT split by --tp or --pp equals one CPU process") {
  if (!nccl_usable()) return;
  auto world = test::world();
  const int n = world->size();
  fs::path dir = test::shared_scratch("nccl_train", "gpt");
  // 300 tokens over 8 letters, with runs to learn; written by rank 0.
  const fs::path data = dir / "tokens.h5";
  if (world->rank() == 0) {
    Generator g(5);
    Tensor jumps = randint(0, 8, {300}, DType::Int64, &g);
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < 300; ++i) ids.push_back((i % 3 == 0 ? jumps.data_ptr<int64_t>()[i] : ids.back() + 1) % 8);
    data::DatasetInfo info;
    info.name = "letters";
    for (char c : std::string("abcdefgh")) info.vocab.push_back(std::string(1, c));
    data::write_token_dataset(data.string(), tensor(ids, {static_cast<int64_t>(ids.size())}), info);
  }
  world->barrier();  // the file is complete before the other ranks open it
  auto gpt = [&](const fs::path& out, const Mesh& m, bool cuda) {
    train::TrainOptions o = mlp_options(data, out, m, cuda);
    o.model = train::ModelKind::kGpt;
    o.layers = 2;  // 4 pipeline layers: embedding, 2 blocks, head
    o.heads = 4;
    o.d_model = 16;
    o.context = 8;
    o.epochs = 1;  // and its validation, which --tp computes over vocabulary slices
    o.batch = 4;
    return o;
  };
  // tp: the vocabulary-parallel embedding, head and loss; pp: the tied embedding on both ends;
  // both at 4 ranks: each stage split over its tensor group.
  std::vector<Mesh> meshes{Mesh{.tp = n}, Mesh{.dp = n / 2, .pp = 2}};
  if (n == 4) meshes.push_back(Mesh{.tp = 2, .pp = 2});
  for (const Mesh& m : meshes) {
    CAPTURE(m.name());
    const fs::path ref_dir = dir / ("ref_" + m.name() + "_rank" + std::to_string(world->rank()));
    train::TrainOptions ref = gpt(ref_dir, Mesh{}, /*cuda=*/false);
    ref.batch *= m.dp;
    const train::TrainSummary expected = run(ref);
    const train::TrainSummary got = run(gpt(dir / m.name(), m, /*cuda=*/true));
    CHECK(got.steps == expected.steps);
    CHECK(test::excess(test::model_file(dir / m.name()), test::model_file(ref_dir), 1e-4, 1e-5) <= 0);
    REQUIRE(got.val_loss.has_value());
    CHECK(*got.val_loss == doctest::Approx(*expected.val_loss).epsilon(1e-4));
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --device cuda over NCCL: a run resumed mid-epoch ends bit-identical to one never stopped") {
  if (!nccl_usable()) return;
  auto world = test::world();
  const int n = world->size();
  fs::path dir = test::shared_scratch("nccl_train", "resume");
  fs::path data = test::tiny_image_dataset(dir, "tiny.h5", kExamples, 4);
  for (Mesh m : {Mesh{.dp = n}, Mesh{.dp = n / 2, .pp = 2}}) {
    CAPTURE(m.name());
    // Stopped after step 1: mid-epoch at every dp here (8, 4 or 2 steps per epoch).
    test::check_resumed_equals_whole([](const train::TrainOptions& t) { return run(t).steps; },
                                     mlp_options(data, dir / ("whole_" + m.name()), m, /*cuda=*/true),
                                     dir / ("whole_" + m.name()), dir / ("stopped_" + m.name()), 1,
                                     2 * kExamples / (kBatch * m.dp));
  }
  world->barrier();
  if (world->rank() == 0) fs::remove_all(dir);
}
