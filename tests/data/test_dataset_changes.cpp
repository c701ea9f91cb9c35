/*
 * An HDF5 dataset whose file is replaced, truncated or deleted while a run reads it
 * (Hdf5File::check_unchanged, Dataset::check_unchanged): the loader's next batch fails with an
 * error naming the file and what became of it, never garbage data, however much of the file is
 * already in the chunk cache.
 */
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "data/data.h"
#include "tests/data/data_test_util.h"

using namespace loom;
using namespace loom::data;
namespace fs = std::filesystem;

namespace {

enum class Change { kReplace, kTruncate, kDelete };

void apply(Change change, const std::string& path, const test::ScratchDir& dir) {
  switch (change) {
    case Change::kReplace: {
      // As make_dataset rewrites a file: a new one renamed over the name (valid HDF5, other data).
      const std::string other = test::write_synthetic(dir, "other.h5", 96);
      fs::rename(other, path);
      break;
    }
    case Change::kTruncate:
      fs::resize_file(path, fs::file_size(path) / 2);
      break;
    case Change::kDelete:
      fs::remove(path);
      break;
  }
}

}  // namespace

TEST_CASE("dataset changes: a file replaced, truncated or deleted between batches ends the pass naming it") {
  const std::pair<Change, const char*> cases[] = {{Change::kReplace, "was replaced by another file"},
                                                  {Change::kTruncate, "changed size from"},
                                                  {Change::kDelete, "was deleted"}};
  for (const auto& [change, what] : cases) {
    for (int workers : {0, 2}) {
      for (size_t cache : {size_t{0}, size_t{64} << 20}) {  // every read from disk; all of it cached
        CAPTURE(what);
        CAPTURE(workers);
        CAPTURE(cache);
        test::ScratchDir dir("dataset_changes");
        const std::string path = test::write_synthetic(dir, "train.h5", 96);
        auto ds = std::make_shared<Hdf5ImageDataset>(path, Hdf5ImageOptions{.chunk_cache_bytes = cache});
        // 24 batches: more than the batches prefetched ahead of the consumer (4 with 2 workers).
        DataLoader loader(ds, DataLoaderOptions().batch_size(4).workers(workers).prefetch(2));
        int64_t delivered = 0;
        const std::string msg = test::error_of([&] {
          for (Batch& b : loader) {
            // Every delivered batch holds the original file's images.
            for (int64_t k = 0; k < b.data.size(0); ++k)
              CHECK(b.data.select(0, k).flatten().data_ptr<uint8_t>()[1] == test::pixel(b.indices[k], 0, 0, 1));
            if (++delivered == 2) apply(change, path, dir);
          }
        });
        CAPTURE(msg);
        CHECK(test::contains_all(msg, {"HDF5 file '" + path + "'", what, "while it was open for reading"}));
        CHECK(delivered >= 2);
        CHECK(delivered <= 2 + 2 + 1);  // at most the prefetched batches after the change
      }
    }
  }
}

TEST_CASE("dataset changes: the data sets say where their examples come from") {
  test::ScratchDir dir("dataset_source");
  const std::string path = test::write_synthetic(dir, "train.h5", 20);
  auto ds = std::make_shared<Hdf5ImageDataset>(path);
  CHECK(ds->source() == path);
  CHECK(Subset(ds, 5).source() == path);
  CHECK_NOTHROW(ds->check_unchanged());
  CHECK(TensorDataset(zeros({3, 2})).source().empty());
}
