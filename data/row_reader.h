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
 */
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
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
    bool ready = false;
    size_t bytes = 0;
    std::list<int64_t>::iterator lru;
  };

  Block block(int64_t k) const;
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
  mutable std::mutex mutex_;
  mutable std::unordered_map<int64_t, Entry> entries_;
  mutable std::list<int64_t> lru_;  // ready blocks, most recently used first
  mutable CacheStats stats_;
};

}  // namespace loom::data
