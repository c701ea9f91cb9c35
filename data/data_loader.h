/*
 * DataLoader: batches from a dataset, as torch::data's loader: sampling, worker threads,
 * bounded prefetch, per-sample transforms, collation, and delivery to the CPU or a GPU.
 *
 *   auto train = std::make_shared<Hdf5ImageDataset>("fashion-mnist-train.h5");
 *   auto augment = std::make_shared<Compose>(Compose{std::make_shared<RandomCrop>(28, 28, 2),
 *       std::make_shared<RandomHorizontalFlip>(),
 *       std::make_shared<Normalize>(std::vector<float>{0.286f}, std::vector<float>{0.353f})});
 *   DataLoader loader(train, DataLoaderOptions().batch_size(128).shuffle(true).seed(1).workers(2), augment);
 *   for (int epoch = 0; epoch < 10; ++epoch)
 *     for (Batch& batch : loader)   // batch.data float32 [128, 1, 28, 28], batch.target int64 [128]
 *       step(batch);
 *
 * Determinism: epoch e's order is the sampler's indices(e), and sample i's transform draws from
 * SampleRng(seed, e, i); batch b holds positions [b * B, (b + 1) * B) of that order. So the
 * sequence of batches is a function of (seed, epoch) alone, the same with 0, 1 or 8 workers
 * and however the threads are scheduled.
 *
 * Position: each full pass over the loader is one epoch; the next pass is the next epoch.
 * state() is the position of the next batch (epoch, batch, seed) and load_state() restores it:
 * a training checkpoint stores it, and the resumed loader delivers exactly the remaining
 * batches of the interrupted epoch, then carries on. Leaving a pass early (break) keeps the
 * position too: the next pass continues where it stopped.
 *
 * Errors: a sample whose reading or transform throws reaches the caller as a loom::Error
 * naming the sample's dataset index, its epoch and batch, the worker that read it and the
 * dataset's file (Dataset::source()), and the original message; the loader has then stopped
 * and joined its workers. Destroying the loader, or starting a new pass, mid-epoch stops and
 * joins them as well. Before each batch the dataset checks that its file is still the one it
 * opened (Dataset::check_unchanged()): a file replaced, truncated or deleted mid-run is an error
 * naming it, never garbage data.
 *
 * Hangs: with timeout(seconds) > 0 (as torch's DataLoader(timeout=...)), a batch not ready
 * within that time after it is asked for ends the pass with a loom::Error naming the worker, the
 * sample it is stuck on and the file. A stuck thread cannot be joined: it is detached, and it
 * keeps what it uses alive by itself (batch_pipeline.h), so neither that error nor destroying
 * the loader afterwards waits for it.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/batch_pipeline.h"
#include "data/collate.h"
#include "data/dataset.h"
#include "data/device_transfer.h"
#include "data/sampler.h"
#include "data/transform.h"

// A chainable option, as libtorch's TORCH_ARG: options.batch_size(64) sets, batch_size() reads.
#define LOOM_DATA_ARG(T, name, default_value) \
 public:                                      \
  auto& name(const T& value) {                \
    name##_ = value;                          \
    return *this;                             \
  }                                           \
  const T& name() const {                     \
    return name##_;                           \
  }                                           \
                                              \
 private:                                     \
  T name##_ = default_value;

namespace loom::data {

struct DataLoaderOptions {
  LOOM_DATA_ARG(int64_t, batch_size, 1)
  // A fresh random order every epoch (RandomSampler from the seed); exclusive with a sampler.
  LOOM_DATA_ARG(bool, shuffle, false)
  // Seeds the shuffle and every transform's randomness.
  LOOM_DATA_ARG(uint64_t, seed, 0)
  // Drop the last batch of an epoch when it is smaller than batch_size.
  LOOM_DATA_ARG(bool, drop_last, false)
  // Worker threads; 0 makes each batch on the caller's thread when it is asked for.
  LOOM_DATA_ARG(int, workers, 0)
  // Batches made ahead of the one being consumed (at least one per worker is used).
  LOOM_DATA_ARG(int, prefetch, 4)
  // Collate into page-locked memory (when a GPU is present), for fast copies to it.
  LOOM_DATA_ARG(bool, pin_memory, false)
  // Where batches are delivered; a CUDA device gets asynchronous copies from pinned memory.
  LOOM_DATA_ARG(Device, device, kCPU)
  // Seconds a batch may take to arrive once it is asked for; 0: wait as long as it takes.
  // Needs workers >= 1 (with 0 the caller's own thread reads, and cannot time itself out).
  LOOM_DATA_ARG(double, timeout, 0)
};

// The loader's position: the next batch it delivers is batch `batch` of epoch `epoch`.
struct LoaderState {
  int64_t epoch = 0;
  int64_t batch = 0;
  uint64_t seed = 0;

  // For checkpoints: {"epoch", "batch", "seed"} (the seed's bits as int64).
  std::map<std::string, int64_t> to_map() const;
  // Throws loom::Error naming a missing key.
  static LoaderState from_map(const std::map<std::string, int64_t>& values);
  friend bool operator==(const LoaderState&, const LoaderState&) = default;
};

class DataLoader {
 public:
  // `transform` (optional) is applied to every example in the workers, with randomness from
  // (seed, epoch, index). `sampler` (optional) replaces the sequential or shuffled order.
  // Throws loom::Error on an empty dataset or invalid options.
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {},
             TransformPtr transform = nullptr, std::shared_ptr<const Sampler> sampler = nullptr);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  class Iterator;
  struct Sentinel {};
  // Starts a pass: the rest of the current epoch, from state().batch on.
  Iterator begin();
  Sentinel end() const { return {}; }

  // Batches per epoch.
  int64_t num_batches() const;
  LoaderState state() const;
  void load_state(const LoaderState& state);
  // The next pass starts epoch `epoch` at its first batch.
  void set_epoch(int64_t epoch);
  const DataLoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // Batch `index` of `epoch`, made on the caller's thread: exactly what a pass delivers.
  Batch batch(int64_t epoch, int64_t index) const;

 private:
  struct Prepared {
    Batch batch;
    std::shared_ptr<PendingCopy> copy;
  };
  struct Pass;  // what a pass's workers use; they own it jointly (data_loader.cpp)
  std::shared_ptr<Pass> make_pass(int64_t epoch, std::shared_ptr<const std::vector<int64_t>> order,
                                  int workers) const;
  static Prepared produce(Pass& pass, int64_t index, int worker);
  std::string timeout_message(const PipelineTimeout& timeout) const;
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;
  bool next(Batch& out);  // false at the end of the epoch
  void stop();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  TransformPtr transform_;
  std::shared_ptr<const Sampler> sampler_;
  bool default_sampler_ = false;
  std::shared_ptr<const DeviceTransfer> transfer_;
  BatchAllocator host_alloc_;
  std::shared_ptr<Pass> pass_;  // the running pass's, for the timeout's message

  int64_t epoch_ = 0, next_batch_ = 0;
  std::unique_ptr<OrderedPipeline<Prepared>> pipeline_;
  mutable int64_t order_epoch_ = -1;
  mutable std::shared_ptr<const std::vector<int64_t>> order_;
};

// An input iterator over one pass.
class DataLoader::Iterator {
 public:
  Batch& operator*() { return batch_; }
  Batch* operator->() { return &batch_; }
  Iterator& operator++() {
    if (!loader_->next(batch_)) loader_ = nullptr;
    return *this;
  }
  friend bool operator==(const Iterator& it, Sentinel) { return it.loader_ == nullptr; }

 private:
  friend class DataLoader;
  explicit Iterator(DataLoader* loader) : loader_(loader) {}
  DataLoader* loader_;
  Batch batch_;
};

}  // namespace loom::data
