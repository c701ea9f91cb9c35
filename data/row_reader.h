/*
 * RowReader: random access to the rows of one HDF5 dataset (row = everything after the first
 * dimension: one image, one token), through a cache of decoded blocks.
 *
 * A block is one chunk of a chunked dataset (or about 1 MiB of rows of a contiguous one). A
 * shuffled epoch touches the chunks in random order, so without a cache every sample would
 * decode a whole chunk; with it, each chunk is read and decoded once while it stays cached.
 *
 * The fast path (chunked, every chunk spanning whole rows, filters Loom can decode, element
 * type already the memory dtype) reads a chunk's stored bytes with H5Dread_chunk under the
 * HDF5 lock, and inflates it outside the lock, so several workers decompress in parallel.
 * Everything else reads rows by hyperslab with H5Dread, under the lock. Two threads wanting the
 * same block wait for one read rather than both reading it.
 *
 * The cache is read far more often than it changes, so a hit takes its lock shared and copies
 * the rows while holding it (eviction, which takes it exclusively, cannot free them meanwhile):
 * workers never wait for each other on hits. Recency is a timestamp per block, advanced on
 * every miss; eviction removes the block used least recently by that measure.
 */
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "data/cache_stats.h"
#include "data/hdf5_file.h"

namespace loom::data {

class RowReader {
 public:
  // Checks a freshly decoded block: rows [first_row, first_row + rows) at `data` (memory
  // dtype). Throws to reject the block (e.g. a token out of the vocabulary).
  using Validator = std::function<void(const void* data, int64_t first_row, int64_t rows)>;

  // Reads dataset `name` of `file` as `dtype`, keeping up to `cache_bytes` of decoded blocks.
  RowReader(std::shared_ptr<Hdf5File> file, std::string name, DType dtype, size_t cache_bytes,
            Validator validator = {});
  RowReader(const RowReader&) = delete;
  RowReader& operator=(const RowReader&) = delete;

  const Hdf5DatasetInfo& info() const { return info_; }
  int64_t rows() const { return info_.rows(); }
  int64_t row_elements() const { return info_.row_elements(); }
  DType dtype() const { return dtype_; }
  // True when blocks come from raw chunks decoded outside the HDF5 lock.
  bool raw_chunks() const { return raw_chunks_; }
  int64_t block_rows() const { return block_rows_; }

  // Copies rows [begin, end) into `out` (contiguous, (end - begin) * row_elements elements).
  void read(int64_t begin, int64_t end, void* out) const;
  // The same by hyperslab, bypassing the cache (one H5Dread under the lock).
  void read_hyperslab(int64_t begin, int64_t end, void* out) const;

  CacheStats stats() const;

 private:
  using Block = std::shared_ptr<const std::vector<uint8_t>>;
  struct Entry {
    std::shared_future<Block> block;
    bool ready = false;  // written under the exclusive lock
    size_t bytes = 0;
    const uint8_t* data = nullptr;  // the block's bytes, once ready
    std::atomic<uint64_t> last_used{0};
  };

  // Copies `rows` rows starting at row `first` of block k to dst.
  void copy_rows(int64_t k, int64_t first, int64_t rows, uint8_t* dst) const;
  Block block_slow(int64_t k) const;  // the exclusive path: wait for or load block k
  Block load_block(int64_t k) const;
  std::string where(int64_t k) const;

  std::shared_ptr<Hdf5File> file_;
  std::string name_;
  Hdf5Handle dataset_;
  Hdf5DatasetInfo info_;
  DType dtype_;
  size_t row_bytes_ = 0;
  int64_t block_rows_ = 1;
  bool raw_chunks_ = false;
  Validator validator_;

  size_t capacity_;
  mutable std::shared_mutex mutex_;
  mutable std::unordered_map<int64_t, std::unique_ptr<Entry>> entries_;
  mutable std::atomic<uint64_t> clock_{0};
  mutable std::atomic<int64_t> hits_{0}, misses_{0};
  mutable int64_t evictions_ = 0, ready_entries_ = 0;  // under the exclusive lock
  mutable size_t bytes_ = 0;
};

}  // namespace loom::data
