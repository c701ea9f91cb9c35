/*
 * The on-disk cache of preprocessed samples: every example of a source dataset (typically a
 * MapDataset doing expensive deterministic preprocessing) written once to one file, then
 * served zero-copy from a private memory map (a write to a served tensor never reaches the
 * file) by every later run.
 *
 * The file is keyed by the source's identity (its file's path, size, modification time and
 * inode, and the description of every transform applied) and by a version string the user
 * bumps when preprocessing code changes. On open the key, the structure and a CRC-32 of the
 * whole file are checked; a stale, truncated or corrupt cache is rebuilt, never used. The file
 * is written to a temporary name, fsynced and renamed, so a crash mid-build leaves no cache
 * that could be mistaken for a good one.
 *
 * Layout: "LOOMDC01", header (format, identity, version, count), the records (per tensor a
 * 64-byte descriptor then its bytes, padded to 64 so that mapped tensors are aligned), the
 * index of record offsets, and a footer (index offset, CRC-32 of everything before it,
 * "LOOMDCOK").
 */
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "data/cache_stats.h"
#include "data/dataset.h"

namespace loom::data {

class DiskCachedDataset : public Dataset {
 public:
  // Opens the cache at `path` if it is valid for (source->identity(), version), else builds
  // it from `source` (reading every example once). Throws loom::Error when the source has no
  // identity or the cache cannot be written.
  DiskCachedDataset(std::shared_ptr<const Dataset> source, std::string path, std::string version = "1");
  ~DiskCachedDataset() override;

  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  std::string identity() const override { return source_->identity(); }

  // Whether this object built the file, and why ("no cache file", "stale: ...", "corrupt: ...").
  bool rebuilt() const { return !rebuild_reason_.empty(); }
  const std::string& rebuild_reason() const { return rebuild_reason_; }
  // hits: examples served from the file; misses: examples computed to build it.
  CacheStats stats() const;
  const std::string& path() const { return path_; }

 private:
  struct Mapping;
  // Empty when the file at path_ is a valid cache for the key, else why not.
  std::string open_existing();
  void build();

  std::shared_ptr<const Dataset> source_;
  std::string path_, identity_, version_;
  std::string rebuild_reason_;
  std::shared_ptr<Mapping> mapping_;
  std::vector<uint64_t> offsets_;
  int64_t size_ = 0;
  int64_t built_ = 0;
  mutable std::atomic<int64_t> hits_{0};
};

}  // namespace loom::data
