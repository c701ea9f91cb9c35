/*
 * DataLoader: the batches are a function of (seed, epoch) only, identical with 0, 1 and 4
 * workers under random scheduling jitter; epochs cover the data once; drop_last; resuming
 * from a saved state yields exactly the remaining batches; a worker's exception reaches the
 * caller with the sample index; prefetch is bounded; distributed shards; text windows; and,
 * on a GPU, pinned asynchronous copies that deliver the same values.
 */
#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "tests/data/data_test_util.h"
#include "tests/gpu_test.h"

using namespace loom;
using namespace loom::data;
using loom::test::error_of;

namespace {

// Sleeps a random few hundred microseconds in get() (random per call, not per index), so
// that workers finish out of order.
class JitterDataset : public Dataset {
 public:
  explicit JitterDataset(std::shared_ptr<const Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t index) const override {
    thread_local std::mt19937 rng(std::random_device{}());
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    return inner_->get(index);
  }

 private:
  std::shared_ptr<const Dataset> inner_;
};

// Throws for one index; counts calls.
class FailingDataset : public Dataset {
 public:
  FailingDataset(int64_t n, int64_t bad, bool std_exception = true) : n_(n), bad_(bad), std_(std_exception) {}
  int64_t size() const override { return n_; }
  Example get(int64_t index) const override {
    calls.fetch_add(1);
    if (index == bad_) {
      if (std_) LOOM_FAIL("boom at ", index);
      throw 42;
    }
    return {full({3}, static_cast<double>(index), kInt64), scalar_tensor(index, kInt64)};
  }
  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t n_, bad_;
  bool std_;
};

// A batch as comparable values.
struct Seen {
  std::vector<int64_t> indices;
  std::vector<float> data;
  std::vector<int64_t> target;
  int64_t epoch, index;
  bool operator==(const Seen&) const = default;
};

Seen seen(const Batch& b) {
  return {b.indices, b.data.to(kFloat32).to_vector<float>(), b.target.to_vector<int64_t>(), b.epoch, b.index};
}

std::vector<Seen> run_epochs(DataLoader& loader, int epochs) {
  std::vector<Seen> out;
  for (int e = 0; e < epochs; ++e)
    for (Batch& b : loader) out.push_back(seen(b));
  return out;
}

TransformPtr augmentation() {
  return std::make_shared<Compose>(
      Compose{std::make_shared<RandomCrop>(8, 8, 2), std::make_shared<RandomHorizontalFlip>(),
              std::make_shared<Normalize>(std::vector<float>{0.5f}, std::vector<float>{0.25f})});
}

}  // namespace

TEST_CASE("batches depend only on the seed and epoch: 0, 1 and 4 workers under jitter agree") {
  test::ScratchDir dir("determinism");
  const std::string path =
      test::write_synthetic(dir, "d.h5", 300, 1, 8, 8, {.chunk_rows = 32, .deflate_level = 1});
  auto dataset = std::make_shared<JitterDataset>(std::make_shared<Hdf5ImageDataset>(path));
  auto options = DataLoaderOptions().batch_size(32).shuffle(true).seed(7);
  DataLoader reference(dataset, options, augmentation());
  const std::vector<Seen> expected = run_epochs(reference, 2);
  REQUIRE(expected.size() == 2 * 10);  // 300 / 32 rounded up, two epochs
  for (int workers : {1, 4}) {
    for (int prefetch : {1, 8}) {
      CAPTURE(workers);
      CAPTURE(prefetch);
      DataLoader loader(dataset, DataLoaderOptions(options).workers(workers).prefetch(prefetch),
                        augmentation());
      CHECK(run_epochs(loader, 2) == expected);
    }
  }
  // batch(epoch, i) makes exactly what a pass delivers.
  CHECK(seen(reference.batch(1, 3)) == expected[13]);
  // Another seed, another sequence.
  DataLoader other(dataset, DataLoaderOptions(options).seed(8).workers(2), augmentation());
  CHECK(run_epochs(other, 1)[0].indices != expected[0].indices);
}

TEST_CASE("an epoch visits every example once, in batches of the requested size") {
  auto ds = std::make_shared<TensorDataset>(arange(100).view({100, 1}), arange(100));
  for (bool drop_last : {false, true}) {
    DataLoader loader(ds, DataLoaderOptions().batch_size(16).shuffle(true).drop_last(drop_last).workers(2));
    CHECK(loader.num_batches() == (drop_last ? 6 : 7));
    std::vector<int64_t> all;
    std::vector<int64_t> first_epoch_order;
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> order;
      int64_t batches = 0;
      for (Batch& b : loader) {
        CHECK(b.epoch == epoch);
        CHECK(b.index == batches++);
        const bool last = b.index == loader.num_batches() - 1;
        CHECK(b.size() == (last && !drop_last ? 4 : 16));
        CHECK(b.data.sizes() == IntArrayRef{b.size(), 1});
        CHECK(b.data.is_contiguous());
        CHECK(b.data.flatten().to_vector<int64_t>() == b.indices);  // row i is example indices[i]
        CHECK(b.target.to_vector<int64_t>() == b.indices);
        order.insert(order.end(), b.indices.begin(), b.indices.end());
      }
      std::set<int64_t> distinct(order.begin(), order.end());
      CHECK(distinct.size() == order.size());
      CHECK(order.size() == (drop_last ? 96u : 100u));
      if (epoch == 0)
        first_epoch_order = order;
      else
        CHECK(order != first_epoch_order);  // reshuffled
    }
  }
  DataLoader sequential(ds, DataLoaderOptions().batch_size(30));
  std::vector<int64_t> order;
  for (Batch& b : sequential) order.insert(order.end(), b.indices.begin(), b.indices.end());
  CHECK(order == arange(100).to_vector<int64_t>());
}

TEST_CASE("Subset serves the first n examples of a dataset, and only those") {
  auto ds = std::make_shared<TensorDataset>(arange(100).view({100, 1}), arange(100));
  auto first = std::make_shared<Subset>(ds, 30);
  CHECK(first->size() == 30);
  CHECK(first->get(29).target.item<int64_t>() == 29);
  CHECK(error_of([&] { first->get(30); }).find("index 30 out of range [0, 30)") != std::string::npos);
  DataLoader loader(first, DataLoaderOptions().batch_size(8).shuffle(true).workers(2));
  std::set<int64_t> seen;
  for (Batch& b : loader) seen.insert(b.indices.begin(), b.indices.end());
  const std::vector<int64_t> expected = arange(30).to_vector<int64_t>();
  CHECK(seen == std::set<int64_t>(expected.begin(), expected.end()));
  CHECK(error_of([&] { Subset(ds, 101); }).find("expected a size in [1, 100]") != std::string::npos);
  CHECK(error_of([&] { Subset(ds, 0); }).find("got 0") != std::string::npos);
  CHECK(error_of([&] { Subset(nullptr, 1); }).find("null dataset") != std::string::npos);
}

TEST_CASE("resuming from a saved state yields exactly the remaining batches") {
  test::ScratchDir dir("resume");
  const std::string path =
      test::write_synthetic(dir, "r.h5", 250, 1, 8, 8, {.chunk_rows = 64, .deflate_level = 1});
  auto ds = std::make_shared<Hdf5ImageDataset>(path);
  auto options = DataLoaderOptions().batch_size(20).shuffle(true).seed(123);
  DataLoader reference(ds, options, augmentation());
  const std::vector<Seen> all = run_epochs(reference, 3);  // 13 batches per epoch
  REQUIRE(all.size() == 39);

  // Train through epoch 0 and 5 batches of epoch 1, checkpointing after each batch.
  DataLoader first(ds, DataLoaderOptions(options).workers(3), augmentation());
  std::map<std::string, int64_t> checkpoint;
  std::vector<Seen> before;
  for (Batch& b : first) before.push_back(seen(b));
  for (Batch& b : first) {
    before.push_back(seen(b));
    checkpoint = first.state().to_map();
    if (b.index == 4) break;  // the job dies here
  }
  CHECK(checkpoint == std::map<std::string, int64_t>{{"epoch", 1}, {"batch", 5}, {"seed", 123}});

  // A new process, another worker count: the rest of epoch 1, then epoch 2.
  DataLoader resumed(ds, DataLoaderOptions(options).workers(1), augmentation());
  resumed.load_state(LoaderState::from_map(checkpoint));
  std::vector<Seen> after = run_epochs(resumed, 2);
  before.insert(before.end(), after.begin(), after.end());
  CHECK(before == all);

  // A pass left early continues where it stopped on the same loader.
  DataLoader same(ds, DataLoaderOptions(options).workers(2), augmentation());
  std::vector<Seen> pieces;
  for (Batch& b : same) {
    pieces.push_back(seen(b));
    if (b.index == 2) break;
  }
  CHECK(same.state() == LoaderState{0, 3, 123});
  for (Batch& b : same) pieces.push_back(seen(b));
  CHECK(same.state() == LoaderState{1, 0, 123});
  CHECK(pieces == std::vector<Seen>(all.begin(), all.begin() + 13));
  // The state after the last batch of an epoch is the start of the next; set_epoch jumps.
  same.set_epoch(2);
  CHECK(seen(*same.begin()) == all[26]);
  CHECK_THROWS_AS(same.load_state({0, 14, 123}), Error);
  CHECK_THROWS_AS(LoaderState::from_map({{"epoch", 1}}), Error);
}

TEST_CASE("an exception in a worker reaches the caller with the sample index, and is not swallowed") {
  for (int workers : {0, 1, 3}) {
    CAPTURE(workers);
    auto ds = std::make_shared<FailingDataset>(200, 137);
    DataLoader loader(ds,
                      DataLoaderOptions().batch_size(10).workers(workers));  // sequential: 137 is in batch 13
    int64_t delivered = 0;
    const std::string msg = test::error_of([&] {
      for (Batch& b : loader) {
        CHECK(b.index == delivered);
        ++delivered;
      }
    });
    CHECK(test::contains_all(msg, {"DataLoader: sample 137", "epoch 0, batch 13", "boom at 137"}));
    CHECK(delivered == 13);  // every batch before the failure, in order
    CHECK(loader.state() == LoaderState{0, 13, 0});
    // Asking again fails again: the error is not lost.
    CHECK(test::contains_all(test::error_of([&] { loader.begin(); }), {"sample 137"}));
  }
  auto odd = std::make_shared<FailingDataset>(50, 3, /*std_exception=*/false);
  DataLoader loader(odd, DataLoaderOptions().batch_size(4).workers(2));
  CHECK(test::contains_all(test::error_of([&] { loader.begin(); }), {"sample 3", "not a std::exception"}));
  // Examples that do not stack are named too.
  auto ragged = std::make_shared<FunctionTransform>(
      "ragged",
      [](const Example& e, SampleRng&) {
        return Example{zeros({e.target.item<int64_t>() % 2 + 1}), e.target};
      },
      false);
  DataLoader mixed(std::make_shared<TensorDataset>(zeros({8, 2}), arange(8)),
                   DataLoaderOptions().batch_size(4), ragged);
  CHECK(test::contains_all(test::error_of([&] { mixed.begin(); }),
                           {"batch 0 of epoch 0", "collate", "example 1"}));
}

// Records the intra-op thread count each get() sees.
class ThreadCountDataset : public Dataset {
 public:
  int64_t size() const override { return 16; }
  Example get(int64_t index) const override {
    const int n = get_num_threads();
    int seen = max_seen.load();
    while (n > seen && !max_seen.compare_exchange_weak(seen, n)) {
    }
    return {full({2}, static_cast<double>(index)), scalar_tensor(index, kInt64)};
  }
  mutable std::atomic<int> max_seen{0};
};

TEST_CASE("workers run their ops on one thread each; the caller keeps its thread count") {
  const int saved = get_num_threads();
  set_num_threads(2);
  auto ds = std::make_shared<ThreadCountDataset>();
  DataLoader with_workers(ds, DataLoaderOptions().batch_size(4).workers(2));
  for (Batch& b : with_workers) CHECK(b.data.size(0) == 4);
  CHECK(ds->max_seen.load() == 1);  // not a team of 2 per worker
  auto inline_ds = std::make_shared<ThreadCountDataset>();
  DataLoader without_workers(inline_ds, DataLoaderOptions().batch_size(4).workers(0));
  for (Batch& b : without_workers) CHECK(b.data.size(0) == 4);
  CHECK(inline_ds->max_seen.load() == 2);  // 0 workers: read on the caller's thread, with its threads
  set_num_threads(saved);
}

TEST_CASE("prefetch bounds how far the workers run ahead") {
  auto ds = std::make_shared<FailingDataset>(1000, -1);
  DataLoader loader(ds, DataLoaderOptions().batch_size(10).workers(2).prefetch(3));
  auto it = loader.begin();  // batch 0 delivered; the consumer now stalls
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // Batch 0 plus at most 3 ahead: 40 examples, not the 1000 an unbounded queue would read.
  CHECK(ds->calls.load() <= 40);
  CHECK(ds->calls.load() >= 10);
  ++it;
  CHECK(it->index == 1);
}

TEST_CASE("options are checked") {
  auto ds = std::make_shared<TensorDataset>(zeros({10, 2}));
  CHECK_THROWS_AS(DataLoader(ds, DataLoaderOptions().batch_size(0)), Error);
  CHECK_THROWS_AS(DataLoader(ds, DataLoaderOptions().workers(-1)), Error);
  CHECK_THROWS_AS(DataLoader(ds, DataLoaderOptions().prefetch(0)), Error);
  CHECK(test::contains_all(test::error_of([&] {
                             DataLoader(ds, DataLoaderOptions().shuffle(true), nullptr,
                                        std::make_shared<SequentialSampler>(10));
                           }),
                           {"shuffle and a sampler"}));
  CHECK(test::contains_all(
      test::error_of([&] { DataLoader(ds, DataLoaderOptions().batch_size(11).drop_last(true)); }),
      {"leaves no batch"}));
#if !LOOM_WITH_CUDA
  CHECK(test::contains_all(
      test::error_of([&] { DataLoader(ds, DataLoaderOptions().device(Device::cuda())); }), {"CUDA backend"}));
#endif
}

TEST_CASE("distributed loaders read disjoint shards that cover the data") {
  auto ds = std::make_shared<TensorDataset>(arange(96).view({96, 1}), arange(96));
  std::vector<int64_t> all;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler = std::make_shared<DistributedSampler>(96, 3, rank, DistributedSamplerOptions{.seed = 5});
    DataLoader loader(ds, DataLoaderOptions().batch_size(8).workers(1), nullptr, sampler);
    CHECK(loader.num_batches() == 4);
    for (Batch& b : loader) all.insert(all.end(), b.indices.begin(), b.indices.end());
  }
  std::sort(all.begin(), all.end());
  CHECK(all == arange(96).to_vector<int64_t>());
}

TEST_CASE("text: random windows of a token dataset batch into inputs and next-token targets") {
  test::ScratchDir dir("text");
  std::string corpus;
  for (int i = 0; i < 100; ++i) corpus += "the quick brown fox jumps over the lazy dog. ";
  const std::string file = dir.file("corpus.txt");
  std::ofstream(file) << corpus;
  convert_text_file(file, dir.file("corpus.h5"), "fox");
  auto ds = std::make_shared<Hdf5TokenDataset>(dir.file("corpus.h5"),
                                               Hdf5TokenOptions{.block_size = 32, .stride = 16});
  DataLoader loader(ds, DataLoaderOptions().batch_size(8).shuffle(true).seed(3).workers(2),
                    std::make_shared<RandomTokenWindow>(16));
  int64_t batches = 0;
  for (Batch& b : loader) {
    REQUIRE(b.data.sizes() == IntArrayRef{b.size(), 16});
    REQUIRE(b.target.sizes() == IntArrayRef{b.size(), 16});
    CHECK(b.data.dtype() == kInt64);
    for (int64_t r = 0; r < b.size(); ++r) {
      const std::string in = ds->decode(b.data[r]), next = ds->decode(b.target[r]);
      CHECK(in.substr(1) == next.substr(0, 15));  // the target is the input shifted by one
      CHECK(corpus.find(in + next.substr(15)) != std::string::npos);
    }
    ++batches;
  }
  CHECK(batches == loader.num_batches());
}

TEST_CASE("GPU: pinned memory and asynchronous copies deliver the same batches") {
  LOOM_REQUIRE_GPU();
  test::ScratchDir dir("gpu");
  const std::string path = test::write_synthetic(dir, "g.h5", 500, 1, 8, 8);
  auto ds = std::make_shared<Hdf5ImageDataset>(path);
  auto options = DataLoaderOptions().batch_size(64).shuffle(true).seed(2).workers(2);
  DataLoader cpu(ds, options, augmentation());
  DataLoader pinned(ds, DataLoaderOptions(options).pin_memory(true), augmentation());
  DataLoader gpu(ds, DataLoaderOptions(options).device(Device::cuda()), augmentation());
  const std::vector<Seen> expected = run_epochs(cpu, 2);
  CHECK(run_epochs(pinned, 2) == expected);
  std::vector<Seen> got;
  for (int e = 0; e < 2; ++e)
    for (Batch& b : gpu) {
      CHECK(b.data.is_cuda());
      CHECK(b.target.is_cuda());
      got.push_back(seen(b));
    }
  CHECK(got == expected);
}
