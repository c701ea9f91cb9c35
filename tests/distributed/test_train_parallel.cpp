/*
 * `train --tp / --pp / --zero` (tools/train/parallelism.h) under mpirun with 2 and 4 ranks,
 * through run_training on every rank, against one process.
 *
 * The reference is one process with dp times the batch (test_train_dp.cpp explains why that is
 * the same computation as dp replicas). Tensor parallelism splits each layer's matrices and
 * pipeline parallelism cuts the batch into micro-batches whose gradients accumulate; both
 * compute the same sums in another order, so every configuration must end with the reference's
 * parameters (model.safetensors, assembled from the pieces under the single-process names),
 * its logged losses and its validation loss, up to float32 reassociation.
 *
 *   np2: tp 2; pp 2 (GPipe and 1F1B); tp 2 and pp 2 with --clip (the norm over the whole model);
 *        pp 2 with --grad-accum 2; zero 1, 2 and 3 over dp 2 (zero 3 also without prefetch,
 *        with --clip and with --grad-accum 2); a GPT with tp 2, with pp 2 and with zero 3.
 *   np4: dp 2 x tp 2 (also with --clip, and with --grad-accum 2), tp 2 x pp 2, dp 2 x pp 2
 *        (1F1B); zero 1, 2 and 3 over dp 4, and dp 2 x tp 2 with zero 1; a GPT with tp 4, pp 4, zero 3,
 *        and dp 2 x pp 2 (GPipe; the tied embedding on the first and last stages).
 *   The pipeline runs write their --trace and a {"kind":"pipeline"} metrics line.
 *   Both: a run stopped mid-epoch and resumed ends bit-identical to one never stopped, for a
 *   tensor-parallel, a pipeline, a ZeRO-2 and a ZeRO-3 configuration; and each combination that cannot
 *   run is an InputError naming the problem and the fix.
 */
#include <doctest/doctest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
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

using test::bitwise_equal;
using test::excess;
using test::model_file;
using test::train_losses;

constexpr int64_t kExamples = 64;  // a multiple of dp · batch for dp = 1, 2, 4 and batch 8
constexpr int64_t kBatch = 8;

fs::path shared_scratch(const std::string& name) { return test::shared_scratch("train_parallel", name); }

// 64 random 1x8x8 images in `classes` classes, written by rank 0.
fs::path tiny_images(const fs::path& dir, int64_t classes = 4) {
  return test::tiny_image_dataset(dir, "images" + std::to_string(classes) + ".h5", kExamples, classes);
}

// A token stream over a `vocab`-letter alphabet with some structure to learn (runs of letters).
fs::path tiny_tokens(const fs::path& dir, int64_t vocab) {
  fs::path path = dir / ("tokens" + std::to_string(vocab) + ".h5");
  if (test::world()->rank() == 0) {
    std::vector<int64_t> ids;
    Generator g(5);
    Tensor jumps = randint(0, vocab, {520}, DType::Int64, &g);
    for (int64_t i = 0; i < 520; ++i)
      ids.push_back((i % 3 == 0 ? jumps.data_ptr<int64_t>()[i] : ids.back() + 1) % vocab);
    data::DatasetInfo info;
    info.name = "letters";
    for (int64_t v = 0; v < vocab; ++v) info.vocab.push_back(std::string(1, static_cast<char>('a' + v)));
    data::write_token_dataset(path.string(), tensor(ids, {static_cast<int64_t>(ids.size())}), info);
  }
  test::world()->barrier();  // the file is complete before the other ranks open it
  return path;
}

train::TrainOptions mlp_options(const fs::path& data, const fs::path& out) {
  return test::mlp_train_options(data, out, "16,16", kBatch);  // column, row, column (gathering) with --tp
}

train::TrainOptions gpt_options(const fs::path& data, const fs::path& out) {
  train::TrainOptions o;
  o.model = train::ModelKind::kGpt;
  o.layers = 2;  // 4 pipeline layers: embedding, 2 blocks, head
  o.heads = 4;
  o.d_model = 16;
  o.context = 8;
  o.data = data.string();
  o.val = data.string();
  o.workers = 0;
  o.epochs = 1;
  o.batch = 4;
  o.lr = 0.1;  // sgd: Adam's normalisation would magnify the reassociation noise of near-zero gradients
  o.seed = 4;
  o.log_every = 1;
  o.out = out.string();
  return o;
}

train::TrainSummary run(const train::TrainOptions& o) {
  std::ostringstream log;
  return train::run_training(o, log, /*interactive=*/false);
}

// The input error a run stops with ("" if it ran).
std::string input_error(const train::TrainOptions& o) {
  try {
    run(o);
  } catch (const train::InputError& e) {
    return e.what();
  }
  return "";
}

// Checks a parallel run against its single-process reference (both finished).
void check_equal(const fs::path& run_dir, const train::TrainSummary& got, const fs::path& ref_dir,
                 const train::TrainSummary& ref) {
  CHECK(got.steps == ref.steps);
  // float32 sums in another order (split matmuls, all-reduces, micro-batches), over a few steps.
  CHECK(excess(model_file(run_dir), model_file(ref_dir), 1e-4, 1e-5) <= 0);
  REQUIRE(got.val_loss.has_value());
  CHECK(*got.val_loss == doctest::Approx(*ref.val_loss).epsilon(1e-4));
  CHECK(*got.val_accuracy == doctest::Approx(*ref.val_accuracy).epsilon(1e-9));
  if (test::world()->rank() == 0) {  // rank 0 alone writes metrics.jsonl
    std::vector<double> a = train_losses(run_dir), b = train_losses(ref_dir);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));
  }
}

struct Mesh {
  int64_t dp = 1, tp = 1, pp = 1;
  train::PipelineSchedule schedule = train::PipelineSchedule::kOneFOneB;
  int64_t zero = 0;
  double clip = 0;  // small enough to clip every step: the norm must be the whole model's
  int64_t grad_accum = 1;
  bool prefetch = true;  // --zero 3
  std::string name() const {
    return "dp" + std::to_string(dp) + "_tp" + std::to_string(tp) + "_pp" + std::to_string(pp) + "_" +
           std::string(train::to_string(schedule)) + "_zero" + std::to_string(zero) +
           (clip > 0 ? "_clip" : "") + "_accum" + std::to_string(grad_accum) + (prefetch ? "" : "_noprefetch");
  }
};

train::TrainOptions with_mesh(train::TrainOptions o, const Mesh& m) {
  o.dp = m.dp;
  o.tp = m.tp;
  o.pp = m.pp;
  o.zero = m.zero;
  o.clip = m.clip;
  o.grad_accum = m.grad_accum;
  o.no_prefetch = !m.prefetch;
  if (m.pp > 1) {
    o.microbatches = 2;
    o.pipeline_schedule = m.schedule;
  }
  return o;
}

void check_meshes_against_one_process(const std::string& name, const std::vector<Mesh>& meshes) {
  auto world = test::world();
  fs::path dir = shared_scratch(name);
  fs::path data = tiny_images(dir);
  // One reference per data-parallel degree, clipping and accumulation: this rank alone, dp
  // times the batch.
  std::map<std::tuple<int64_t, double, int64_t>, std::pair<fs::path, train::TrainSummary>> refs;
  for (const Mesh& m : meshes) {
    const auto key = std::make_tuple(m.dp, m.clip, m.grad_accum);
    if (refs.count(key)) continue;
    fs::path out = dir / ("ref-dp" + std::to_string(m.dp) + (m.clip > 0 ? "-clip" : "") + "-accum" +
                          std::to_string(m.grad_accum) + "-rank" + std::to_string(world->rank()));
    train::TrainOptions ref = mlp_options(data, out);
    ref.batch = kBatch * m.dp;
    ref.clip = m.clip;
    ref.grad_accum = m.grad_accum;
    refs[key] = {out, run(ref)};
  }
  for (const Mesh& m : meshes) {
    CAPTURE(m.name());
    train::TrainOptions o = with_mesh(mlp_options(data, dir / m.name()), m);
    if (m.pp > 1) o.trace = (dir / (m.name() + ".json")).string();
    train::TrainSummary got = run(o);
    CHECK(got.steps == 2 * kExamples / (kBatch * m.dp * m.grad_accum));
    const auto& [ref_dir, ref] = refs[std::make_tuple(m.dp, m.clip, m.grad_accum)];
    check_equal(dir / m.name(), got, ref_dir, ref);
    if (m.pp > 1 && world->rank() == 0) {
      // --trace with --pp: every stage's micro-batches of the traced steps, and the bubble.
      CHECK(fs::file_size(o.trace + ".pipeline.json") > 0);
      std::ifstream in(dir / m.name() / "metrics.jsonl");
      int64_t lines = 0;
      for (std::string line; std::getline(in, line);)
        if (line.find("\"kind\":\"pipeline\"") != std::string::npos) {
          ++lines;
          auto j = nlohmann::json::parse(line);
          CHECK(j.at("traced_steps") == 3);
          // m = 2: GPipe holds both micro-batches on every stage; 1F1B on stage 0 only, the last
          // stage runs each backward right after its forward.
          CHECK(j.at("peak_live_microbatches") ==
                (m.schedule == train::PipelineSchedule::kGPipe ? nlohmann::json{2, 2}
                                                               : nlohmann::json{2, 1}));
          CHECK(j.at("peak_activation_bytes").size() == 2);
          CHECK(j.at("peak_activation_bytes")[0].get<int64_t>() > 0);
          CHECK(j.at("ideal_bubble").get<double>() == doctest::Approx(1.0 / 3.0));
        }
      CHECK(lines == 1);
    }
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

}  // namespace

TEST_CASE("train --tp / --pp on the mlp equals one process") {
  const int n = test::world()->size();
  if (n == 2)
    check_meshes_against_one_process("mlp", {{.tp = 2},
                                             {.pp = 2, .schedule = train::PipelineSchedule::kGPipe},
                                             {.pp = 2},
                                             {.tp = 2, .clip = 0.5},
                                             {.pp = 2, .clip = 0.5},
                                             {.pp = 2, .grad_accum = 2}});
  else if (n == 4)
    check_meshes_against_one_process("mlp", {{.dp = 2, .tp = 2},
                                             {.tp = 2, .pp = 2},
                                             {.dp = 2, .pp = 2},
                                             {.dp = 2, .tp = 2, .clip = 0.5},
                                             {.dp = 2, .tp = 2, .grad_accum = 2}});
  else if (n == 8)  // 3-D: every rank holds a quarter of one pipeline stage of one replica
    check_meshes_against_one_process("mlp", {{.dp = 2, .tp = 2, .pp = 2},
                                             {.dp = 2, .tp = 2, .pp = 2, .schedule = train::PipelineSchedule::kGPipe,
                                              .clip = 0.5}});
}

TEST_CASE("train --zero 1, 2 and 3 equal data parallelism with DDP") {
  const int n = test::world()->size();
  std::vector<Mesh> meshes{{.dp = n, .zero = 0},
                           {.dp = n, .zero = 1},
                           {.dp = n, .zero = 2},
                           {.dp = n, .zero = 3},
                           {.dp = n, .zero = 3, .prefetch = false},
                           {.dp = n, .zero = 3, .clip = 0.5},  // the norm over every rank's shard
                           {.dp = n, .zero = 3, .grad_accum = 2}};
  if (n == 4) meshes.push_back({.dp = 2, .tp = 2, .zero = 1});
  check_meshes_against_one_process("zero", meshes);
}

TEST_CASE("train --tp / --pp on a GPT equals one process, and model.safetensors holds the whole GPT") {
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("gpt");
  fs::path data = tiny_tokens(dir, 8);
  // 64 training blocks: no DistributedSampler padding at dp 2.
  std::vector<Mesh> meshes;
  if (n == 8) {  // 3-D: a quarter of one stage of one replica per rank
    meshes = {{.dp = 2, .tp = 2, .pp = 2}};
  } else {
    meshes = {{.tp = n}, {.pp = n}, {.dp = n, .zero = 3}};  // zero 3: the head's weight tied to the embedding
    if (n == 4) {
      meshes.push_back({.dp = 2, .pp = 2, .schedule = train::PipelineSchedule::kGPipe});
      meshes.push_back({.tp = 2, .pp = 2});  // each pipeline stage split over its tensor group
      meshes.push_back({.tp = 2, .pp = 2, .clip = 0.5});
    }
  }
  std::map<std::pair<int64_t, double>, std::pair<fs::path, train::TrainSummary>> refs;  // by dp and clip
  for (const Mesh& m : meshes) {
    if (refs.count({m.dp, m.clip})) continue;
    fs::path out = dir / ("ref-dp" + std::to_string(m.dp) + (m.clip > 0 ? "-clip" : "") + "-rank" +
                          std::to_string(world->rank()));
    train::TrainOptions ref = gpt_options(data, out);
    ref.batch *= m.dp;
    ref.clip = m.clip;
    refs[{m.dp, m.clip}] = {out, run(ref)};
  }
  for (const Mesh& m : meshes) {
    CAPTURE(m.name());
    train::TrainSummary got = run(with_mesh(gpt_options(data, dir / m.name()), m));
    const auto& [ref_dir, ref] = refs[{m.dp, m.clip}];
    check_equal(dir / m.name(), got, ref_dir, ref);
    // The file is a complete single-process GPT: tools/quantize and --teacher load it as one.
    if (world->rank() == 0) {
      nn::LoadedModel loaded = nn::load_model(dir / m.name() / "model.safetensors");
      CHECK(loaded.model->num_parameters() == nn::load_model(ref_dir / "model.safetensors").model->num_parameters());
    }
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --trace under mpirun: one trace, a process per rank, every collective with its bytes") {
  // (and, with --pp, every rank's forwards and backwards per micro-batch)
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("trace");
  fs::path data = tiny_images(dir);
  // What each layout must show on every rank: the operation and the group of the mesh it ran on.
  std::vector<std::pair<Mesh, std::vector<std::string>>> cases = {
      {{.dp = n}, {"all_reduce data"}},  // DDP's buckets
      {{.dp = n, .zero = 2}, {"reduce_scatter data", "all_gather data"}},
      {{.dp = n, .zero = 3}, {"all_gather data", "reduce_scatter data"}},
      {{.dp = n / 2, .tp = 2}, {"all_reduce tensor"}},
      {{.dp = n / 2, .pp = 2}, {"send pipeline", "recv pipeline"}}};
  for (const auto& [m, expected] : cases) {
    CAPTURE(m.name());
    train::TrainOptions o = with_mesh(mlp_options(data, dir / m.name()), m);
    o.epochs = 1;
    o.trace = (dir / (m.name() + ".json")).string();
    run(o);
    if (world->rank() != 0) continue;
    std::ifstream in(o.trace);
    const nlohmann::json doc = nlohmann::json::parse(in);
    std::map<int, std::set<std::string>> waited, in_flight, pipeline;  // by process (rank)
    std::set<std::string> processes;
    std::map<std::pair<int, int64_t>, double> flight_begin;
    for (const auto& e : doc.at("traceEvents")) {
      const int pid = e.at("pid").get<int>();
      if (e.at("name") == "process_name") processes.insert(e.at("args").at("name").get<std::string>());
      if (e.value("cat", "") == "communication") {
        CHECK(e.at("args").at("bytes").get<double>() >= 0);
        waited[pid].insert(e.at("name").get<std::string>());
      }
      if (e.value("cat", "") == "pipeline") pipeline[pid].insert(e.at("name").get<std::string>());
      if (e.value("ph", "") == "b") flight_begin[{pid, e.at("id").get<int64_t>()}] = e.at("ts").get<double>();
      if (e.value("ph", "") == "e") {
        // Every flight ends after it began, on the same rank.
        REQUIRE(flight_begin.count({pid, e.at("id").get<int64_t>()}) == 1);
        CHECK(e.at("ts").get<double>() >= flight_begin.at({pid, e.at("id").get<int64_t>()}));
        in_flight[pid].insert(e.at("name").get<std::string>());
      }
    }
    CHECK(processes.size() == static_cast<size_t>(n));
    CHECK(processes.count("rank 0 (dp 0, tp 0, pp 0)") == 1);
    for (int rank = 0; rank < n; ++rank)
      for (const std::string& name : expected) {
        CAPTURE(rank);
        CAPTURE(name);
        CHECK(waited[rank].count(name) == 1);
        CHECK(in_flight[rank].count(name) == 1);
      }
    // With --pp each rank's traced steps also show its forwards and backwards per micro-batch.
    if (m.pp > 1)
      for (int rank = 0; rank < n; ++rank)
        for (const char* name : {"F0", "F1", "B0", "B1"}) {
          CAPTURE(rank);
          CHECK(pipeline[rank].count(name) == 1);
        }
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --tp / --pp: a run resumed mid-epoch ends bit-identical to one never stopped") {
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("resume");
  fs::path data = tiny_images(dir);
  for (Mesh m : {Mesh{.dp = n / 2, .tp = 2}, Mesh{.dp = n / 2, .pp = 2}, Mesh{.dp = n, .zero = 2},
                 Mesh{.dp = n, .zero = 3}}) {
    CAPTURE(m.name());
    // 3 steps: mid-epoch at every dp here (8, 4 or 2 steps per epoch).
    test::check_resumed_equals_whole([](const train::TrainOptions& t) { return run(t).steps; },
                                     with_mesh(mlp_options(data, dir / ("whole_" + m.name())), m),
                                     dir / ("whole_" + m.name()), dir / ("stopped_" + m.name()), 3,
                                     2 * kExamples / (kBatch * m.dp));
  }
  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}

TEST_CASE("train --tp / --pp: combinations that cannot run are input errors naming the fix") {
  auto world = test::world();
  const int n = world->size();
  fs::path dir = shared_scratch("errors");
  fs::path data = tiny_images(dir);

  train::TrainOptions o = mlp_options(data, dir / "wrong-size");
  o.dp = 2;
  o.tp = n;
  CHECK(input_error(o) == "--dp 2 --tp " + std::to_string(n) + " needs mpirun -np " + std::to_string(2 * n) +
                              "; this job has " + std::to_string(n) + " ranks");

  // Three classes cannot be split over the tensor ranks of the last (column-parallel) layer.
  train::TrainOptions classes = mlp_options(tiny_images(dir, 3), dir / "classes");
  classes.tp = n;
  std::string message = input_error(classes);
  CHECK(message.find("--tp " + std::to_string(n) + " does not divide the 3 classes") != std::string::npos);
  CHECK(message.find("an even number of --hidden layers") != std::string::npos);

  // A vocabulary of 7 tokens cannot be split over 2 or 4 ranks.
  train::TrainOptions vocab = gpt_options(tiny_tokens(dir, 7), dir / "vocab");
  vocab.tp = n;
  CHECK(input_error(vocab).find("does not divide the vocabulary of 7 tokens") != std::string::npos);

  // 64 examples in batches of 12: each replica's last batch (64 / dp % 12 = 4 or 8) does not
  // split into 3 micro-batches.
  train::TrainOptions tail = mlp_options(data, dir / "tail");
  tail.dp = n / 2;
  tail.pp = 2;
  tail.batch = 12;
  tail.microbatches = 3;
  CHECK(input_error(tail).find("--microbatches 3 does not divide the epoch's last batch") !=
        std::string::npos);

  // --zero 3 shards whole layers over the data group: not with --tp, and not a model that is no
  // sequence of layers.
  train::TrainOptions fsdp_tp = mlp_options(data, dir / "fsdp-tp");
  fsdp_tp.dp = n / 2;
  fsdp_tp.tp = 2;
  fsdp_tp.zero = 3;
  CHECK(input_error(fsdp_tp).find("--zero 3 with --tp/--pp") != std::string::npos);
  train::TrainOptions fsdp_cnn = mlp_options(data, dir / "fsdp-cnn");
  fsdp_cnn.model = train::ModelKind::kCnn;
  fsdp_cnn.dp = n;
  fsdp_cnn.zero = 3;
  CHECK(input_error(fsdp_cnn).find("--model cnn has no layer-by-layer form") != std::string::npos);

  // A checkpoint holds each rank's piece: another cut of the model reshards it
  // (distributed/reshard.h, tests/tools/reshard_resume_test.sh), but not for another optimizer,
  // and the error names both layouts.
  train::TrainOptions first = mlp_options(data, dir / "recut");
  first.tp = n;
  first.max_steps = 1;
  run(first);
  train::TrainOptions recut = first;
  recut.tp = 1;
  recut.dp = n;
  recut.resume = recut.out;
  recut.optimizer = first.optimizer == train::OptimizerKind::kSgd ? train::OptimizerKind::kAdam
                                                                  : train::OptimizerKind::kSgd;
  const std::string refused = input_error(recut);
  CHECK(refused.find("\"tp\":" + std::to_string(n) + ",\"zero\":0}, this one is {\"dp\":" + std::to_string(n)) !=
        std::string::npos);
  CHECK(refused.find("cannot be resharded: it trained --optimizer") != std::string::npos);

  world->barrier();  // every rank checked before rank 0 removes the files
  if (world->rank() == 0) fs::remove_all(dir);
}
