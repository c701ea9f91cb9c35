/*
 * Caches: the memory cache's LRU order, byte budget and hit rates; a cached dataset serving
 * the same examples as its source; the disk cache built once and reused, rebuilt (never used)
 * when stale (source file changed, transform changed, version bumped) or corrupt (a flipped
 * byte, a truncated file, garbage), and written atomically.
 */
#include <fstream>
#include <thread>

#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;

namespace {

Example example(int64_t i, int64_t bytes) {
  return {full({bytes}, static_cast<double>(i % 200), kUInt8), Tensor()};
}

// Counts get() calls of the source.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(std::shared_ptr<const Dataset> inner) : inner_(std::move(inner)) {}
  int64_t size() const override { return inner_->size(); }
  Example get(int64_t i) const override {
    ++calls;
    return inner_->get(i);
  }
  std::string identity() const override { return inner_->identity(); }
  mutable std::atomic<int64_t> calls{0};

 private:
  std::shared_ptr<const Dataset> inner_;
};

int tmp_files(const test::ScratchDir& dir) {
  int n = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    n += e.path().filename().string().find(".tmp.") != std::string::npos;
  return n;
}

}  // namespace

TEST_CASE("the memory cache stays within its byte budget and evicts examples not read since the last sweep") {
  // 16 shards of 1 KiB: keys 0, 16, 32, ... share shard 0, which holds four 256-byte examples.
  MemoryCache cache(16 * 1024, 1000);
  for (int64_t k = 0; k < 4; ++k) cache.insert(k * 16, example(k, 256));
  CHECK(cache.lookup(16).has_value());  // 16 and 48 are read: they earn a second chance
  CHECK(cache.lookup(48)->data.to_vector<int64_t>()[0] == 3);
  cache.insert(64, example(4, 256));  // over budget: evicts an example not read (0, then 32)
  cache.insert(80, example(5, 256));
  CHECK_FALSE(cache.lookup(0).has_value());
  CHECK_FALSE(cache.lookup(32).has_value());
  for (int64_t k : {16, 48, 64, 80}) CHECK(cache.lookup(k).has_value());
  CacheStats s = cache.stats();
  CHECK(s.hits == 6);
  CHECK(s.misses == 2);
  CHECK(s.evictions == 2);
  CHECK(s.entries == 4);
  CHECK(s.bytes == 4 * 256);
  CHECK(s.hit_rate() == doctest::Approx(0.75));
  // Other shards are untouched by shard 0's evictions.
  cache.insert(1, example(1, 256));
  CHECK(cache.lookup(1).has_value());
  // Replacing an example, and one larger than a shard's budget, which is not kept.
  cache.insert(16, example(9, 128));
  CHECK(cache.lookup(16)->data.numel() == 128);
  cache.insert(16, example(9, 4096));
  CHECK_FALSE(cache.lookup(16).has_value());
  CHECK(cache.stats().bytes == 3 * 256 + 256);
  CHECK_THROWS_AS(cache.lookup(1000), Error);
  cache.clear();
  CHECK(cache.stats().entries == 0);
  CHECK(cache.stats().bytes == 0);
}

TEST_CASE("a cached dataset reads its source once per example while it fits") {
  test::ScratchDir dir("memcache");
  const std::string path = test::write_synthetic(dir, "m.h5", 200, 1, 8, 8);
  auto source = std::make_shared<CountingDataset>(std::make_shared<Hdf5ImageDataset>(path));
  auto cached = std::make_shared<CachedDataset>(source, 1 << 20);
  DataLoader loader(cached, DataLoaderOptions().batch_size(50).shuffle(true).workers(2));
  DataLoader reference(source, DataLoaderOptions().batch_size(50).shuffle(true));
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto it = reference.begin();
    for (Batch& b : loader) {
      CHECK(test::values_equal(b.data, it->data));
      ++it;
    }
  }
  CHECK(source->calls == 200 + 3 * 200);  // once for the cached loader, every time for the reference
  CacheStats s = cached->stats();
  CHECK(s.misses == 200);
  CHECK(s.hits == 400);
  CHECK(s.hit_rate() == doctest::Approx(2.0 / 3));
  // A budget for a quarter of the data: later epochs still hit sometimes, and stay in budget.
  auto small = std::make_shared<CachedDataset>(source, 200 * (64 + 8) / 4);
  DataLoader loader2(small, DataLoaderOptions().batch_size(50).shuffle(true));
  for (int epoch = 0; epoch < 4; ++epoch)
    for (Batch& b : loader2) (void)b;
  CHECK(small->stats().bytes <= small->cache().capacity_bytes());
  CHECK(small->stats().evictions > 0);
  CHECK(small->stats().hit_rate() < 0.5);
}

TEST_CASE("the disk cache is built once, then served from the file") {
  test::ScratchDir dir("disk");
  const std::string path = test::write_synthetic(dir, "d.h5", 300, 1, 8, 8);
  auto normalize = std::make_shared<Normalize>(std::vector<float>{0.5f}, std::vector<float>{0.25f});
  auto pre = std::make_shared<CountingDataset>(
      std::make_shared<MapDataset>(std::make_shared<Hdf5ImageDataset>(path), normalize));
  const std::string cache = dir.file("cache/fmnist.loomcache");
  {
    DiskCachedDataset disk(pre, cache, "v1");
    CHECK(disk.rebuilt());
    CHECK(disk.rebuild_reason() == "no cache file");
    CHECK(pre->calls == 300);
    CHECK(disk.size() == 300);
    for (int64_t i : {0, 150, 299}) {
      Example a = disk.get(i), b = pre->get(i);
      CHECK(test::values_equal(a.data, b.data));
      CHECK(test::values_equal(a.target, b.target));
      CHECK(reinterpret_cast<uintptr_t>(a.data.data_ptr()) % 64 == 0);
    }
    CHECK(disk.stats().hits == 3);
    CHECK(disk.stats().misses == 300);
  }
  pre->calls = 0;
  DiskCachedDataset again(pre, cache, "v1");
  CHECK_FALSE(again.rebuilt());
  CHECK(pre->calls == 0);  // nothing recomputed
  CHECK(again.stats().misses == 0);
  // Writing into a served tensor (which transforms never do) cannot reach the file: the
  // mapping is private, so a fresh open still validates and serves the original values.
  again.get(3).data.fill_(0);
  DiskCachedDataset fresh(pre, cache, "v1");
  CHECK_FALSE(fresh.rebuilt());
  CHECK(test::values_equal(fresh.get(3).data, pre->get(3).data));
  CHECK(tmp_files(dir) == 0);
  // A loader over the disk cache gives the same batches as over the source.
  DataLoader a(std::make_shared<DiskCachedDataset>(pre, cache, "v1"),
               DataLoaderOptions().batch_size(64).workers(2));
  DataLoader b(pre, DataLoaderOptions().batch_size(64));
  auto it = b.begin();
  for (Batch& batch : a) {
    CHECK(test::values_equal(batch.data, it->data));
    ++it;
  }
}

TEST_CASE("a stale disk cache is rebuilt: source file, transform or version changed") {
  test::ScratchDir dir("stale");
  const std::string path = test::write_synthetic(dir, "s.h5", 100, 1, 4, 4);
  auto source = [&](float mean) {
    return std::make_shared<MapDataset>(
        std::make_shared<Hdf5ImageDataset>(path),
        std::make_shared<Normalize>(std::vector<float>{mean}, std::vector<float>{1.0f}));
  };
  const std::string cache = dir.file("s.cache");
  DiskCachedDataset(source(0.5f), cache, "v1");
  CHECK_FALSE(DiskCachedDataset(source(0.5f), cache, "v1").rebuilt());

  DiskCachedDataset bumped(source(0.5f), cache, "v2");
  CHECK(bumped.rebuild_reason().find("stale: cache version 'v1'") == 0);
  DiskCachedDataset changed(source(0.25f), cache, "v2");
  CHECK(changed.rebuild_reason().find("stale: the source changed") == 0);
  CHECK(changed.get(0).data.to_vector<float>()[0] == test::pixel(0, 0, 0, 0) / 255.0f - 0.25f);

  // The source file is rewritten (new contents, new modification time and inode).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  test::write_synthetic(dir, "s.h5", 120, 1, 4, 4);
  DiskCachedDataset rewritten(source(0.25f), cache, "v2");
  CHECK(rewritten.rebuild_reason().find("stale: the source changed") == 0);
  CHECK(rewritten.size() == 120);
}

TEST_CASE("a corrupt disk cache is rebuilt, never used") {
  test::ScratchDir dir("corrupt_cache");
  const std::string path = test::write_synthetic(dir, "c.h5", 100, 1, 8, 8);
  auto source = std::make_shared<MapDataset>(
      std::make_shared<Hdf5ImageDataset>(path),
      std::make_shared<Normalize>(std::vector<float>{0.0f}, std::vector<float>{1.0f}));
  const std::string cache = dir.file("c.cache");
  DiskCachedDataset(source, cache);
  const auto size = static_cast<std::streamoff>(std::filesystem::file_size(cache));
  const std::string pristine = dir.file("pristine");
  std::filesystem::copy_file(cache, pristine);
  auto restore = [&] {
    std::filesystem::copy_file(pristine, cache, std::filesystem::copy_options::overwrite_existing);
  };

  for (std::streamoff offset : {std::streamoff{3}, std::streamoff{40}, size / 2, size - 30, size - 1}) {
    CAPTURE(offset);
    restore();
    test::corrupt_byte(cache, offset);
    DiskCachedDataset d(source, cache);
    CHECK(d.rebuild_reason().find("corrupt") == 0);
    CHECK(test::values_equal(d.get(50).data, source->get(50).data));
  }
  for (std::streamoff keep : {std::streamoff{0}, std::streamoff{10}, size / 2, size - 1}) {
    CAPTURE(keep);
    restore();
    std::filesystem::resize_file(cache, static_cast<uintmax_t>(keep));
    DiskCachedDataset d(source, cache);
    CHECK(d.rebuild_reason().find("corrupt") == 0);
    CHECK(std::filesystem::file_size(cache) == static_cast<uintmax_t>(size));
  }
  std::ofstream(cache, std::ios::trunc) << std::string(5000, 'x');
  CHECK(DiskCachedDataset(source, cache).rebuild_reason().find("corrupt") == 0);
  CHECK(tmp_files(dir) == 0);
  // A dataset with no identity cannot be cached on disk.
  CHECK(
      test::contains_all(test::error_of([&] {
                           DiskCachedDataset d(std::make_shared<TensorDataset>(zeros({4, 2})), dir.file("x"));
                         }),
                         {"no identity"}));
}
