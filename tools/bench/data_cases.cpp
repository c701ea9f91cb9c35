/*
 * Bench cases of the data layer.
 *
 *   loader_fashion_mnist  Fashion-MNIST's 60,000 training images from HDF5, batch 128, shuffled,
 *                         RandomCrop(28, padding 2) + RandomHorizontalFlip + Normalize, float32
 *                         batches: samples/s with 0, 1 and 2 workers, and with the memory cache
 *                         warm (2 workers). The file is the PyTorch anchor's layout
 *                         (../shared/anchors/loader.py): uint8 [N, 1, 28, 28] in chunks of 1024
 *                         images, uncompressed; its HDF5 chunk reads are served by the
 *                         dataset's decoded-chunk cache once warm. Also reported: a cold first
 *                         epoch (fresh dataset, nothing cached) from the converter's default
 *                         gzip file with 0 and 2 workers, which shows the raw-chunk reads and
 *                         the inflating outside the HDF5 lock, and the caches' hit rates.
 *
 * The HDF5 files are converted from Debian's dataset-fashion-mnist on first use, into
 * $LOOM_DATA_DIR, or else build/data/ beside the bench binary's folder.
 */
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "data/data.h"
#include "tools/bench/bench.h"

namespace loom::bench {

namespace {

using namespace loom::data;

std::string data_dir() {
  if (const char* env = std::getenv("LOOM_DATA_DIR"); env && *env) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);  // build/tools/bench
  LOOM_CHECK(!ec, "bench: cannot locate the bench binary to find build/data; set LOOM_DATA_DIR");
  return (exe.parent_path().parent_path() / "data").string();
}

TransformPtr augmentation() {
  return std::make_shared<Compose>(
      Compose{std::make_shared<RandomCrop>(28, 28, 2), std::make_shared<RandomHorizontalFlip>(),
              std::make_shared<Normalize>(std::vector<float>{0.2860f}, std::vector<float>{0.3530f})});
}

DataLoaderOptions loader_options(int workers) {
  return DataLoaderOptions().batch_size(128).shuffle(true).drop_last(true).seed(0).workers(workers);
}

// An endless stream of batches: passes follow one another, one epoch each.
class BatchStream {
 public:
  explicit BatchStream(DataLoader& loader) : loader_(loader) {}
  const Batch& next() {
    if (it_) ++*it_;
    if (!it_ || *it_ == loader_.end()) it_.emplace(loader_.begin());
    return **it_;
  }

 private:
  DataLoader& loader_;
  std::optional<DataLoader::Iterator> it_;
};

double samples_per_second(DataLoader& loader, const TimingOptions& timing) {
  BatchStream stream(loader);
  int64_t rows = 0;
  Timing t = time_median([&] { rows += stream.next().size(); }, timing);
  LOOM_CHECK(rows > 0, "bench: the loader delivered nothing");
  return 128.0 / t.seconds_per_call;
}

// One epoch from a freshly opened file (empty chunk cache), samples per second.
double first_epoch(const std::string& path, int workers) {
  const auto start = std::chrono::steady_clock::now();
  auto ds = std::make_shared<Hdf5ImageDataset>(path);
  DataLoader loader(ds, loader_options(workers), augmentation());
  int64_t rows = 0;
  for (Batch& b : loader) rows += b.size();
  return static_cast<double>(rows) /
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::vector<Metric> loader_fashion_mnist(const TimingOptions& timing) {
  const std::string dir = data_dir();
  // The anchor's layout: chunks of 1024 images, no compression.
  const std::string raw = fashion_mnist_hdf5("train", dir, {.chunk_rows = 1024, .deflate_level = 0});
  const std::string gzip = fashion_mnist_hdf5("train", dir);  // the converter's default: gzip level 1
  auto ds = std::make_shared<Hdf5ImageDataset>(raw);
  std::vector<Metric> out;
  for (int workers : {0, 1, 2}) {
    DataLoader loader(ds, loader_options(workers), augmentation());
    out.push_back(
        {"samples_per_s_w" + std::to_string(workers), samples_per_second(loader, timing), "samples/s"});
  }
  out.push_back({"chunk_cache_hit_rate", ds->chunk_cache_stats().hit_rate(), "fraction"});

  auto cached = std::make_shared<CachedDataset>(ds, size_t{256} << 20);
  DataLoader loader(cached, loader_options(2), augmentation());
  for (Batch& b : loader) (void)b;  // one epoch: every sample decoded into the cache
  out.push_back({"samples_per_s_cached", samples_per_second(loader, timing), "samples/s"});
  out.push_back({"cache_hit_rate", cached->stats().hit_rate(), "fraction"});

  ::sync();  // do not time the writing back of the files just converted
  for (int workers : {0, 2})
    out.push_back({"first_epoch_gzip_samples_per_s_w" + std::to_string(workers), first_epoch(gzip, workers),
                   "samples/s"});
  return out;
}

}  // namespace

std::vector<BenchCase> data_cases() {
  return {
      BenchCase("loader_fashion_mnist", "samples/s",
                "Fashion-MNIST train from HDF5, batch 128, shuffle, crop(pad 2)+flip+normalise, f32: 0/1/2 "
                "workers, memory cache",
                loader_fashion_mnist)};
}

}  // namespace loom::bench
