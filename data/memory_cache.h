/*
 * The in-memory sample cache: decoded examples kept within a byte budget.
 *
 * CachedDataset puts it in front of any dataset: the first epoch reads (and decodes, and
 * preprocesses, if the source is a MapDataset) every sample; later epochs that fit in the
 * budget read none. Cached examples are shared, never copied, which is safe because
 * transforms never modify their input.
 *
 * Keys are example indices in [0, num_keys), so a slot per index replaces a hash table: a hit
 * is one lock and one array access. Eviction is CLOCK (second chance), the usual approximation
 * of least-recently-used: a hit sets the example's "referenced" bit; when over budget a hand
 * sweeps the cached examples, clearing set bits and evicting the first example found clear,
 * i.e. one not read since the hand last passed. The slots are split into shards (index modulo
 * the shard count) with a lock, a budget and a hand each, so workers rarely wait on one another.
 */
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "data/cache_stats.h"
#include "data/dataset.h"

namespace loom::data {

class MemoryCache {
 public:
  // About 48 bytes per key go to the slots, whether cached or not.
  MemoryCache(size_t capacity_bytes, int64_t num_keys);
  MemoryCache(const MemoryCache&) = delete;
  MemoryCache& operator=(const MemoryCache&) = delete;

  std::optional<Example> lookup(int64_t key);
  // Inserts (or replaces) the example, evicting others beyond the budget. An example larger
  // than its shard's budget (capacity / kShards) is not kept.
  void insert(int64_t key, const Example& example);
  void clear();
  CacheStats stats() const;
  size_t capacity_bytes() const { return capacity_; }

  // Bytes an example occupies (its tensors' data).
  static size_t bytes_of(const Example& example);

  static constexpr size_t kShards = 16;

 private:
  struct Slot {
    Example example;
    size_t bytes = 0;
    bool present = false;
    bool referenced = false;
  };
  struct Shard {
    mutable std::mutex mutex;
    std::vector<int64_t> resident;  // cached keys, in the clock's order
    size_t hand = 0;                // position in `resident` of the next key to consider
    size_t bytes = 0;
    int64_t hits = 0, misses = 0, evictions = 0;
  };
  Shard& shard(int64_t key) { return shards_[static_cast<size_t>(key) % kShards]; }
  Slot& slot(int64_t key);
  void evict_one(Shard& s);  // under the shard's lock

  size_t capacity_;
  int64_t num_keys_;
  std::vector<Slot> slots_;
  std::array<Shard, kShards> shards_;
};

// `source` behind a MemoryCache of `capacity_bytes`.
class CachedDataset : public Dataset {
 public:
  CachedDataset(std::shared_ptr<const Dataset> source, size_t capacity_bytes);
  int64_t size() const override { return source_->size(); }
  Example get(int64_t index) const override;
  std::string identity() const override { return source_->identity(); }
  CacheStats stats() const { return cache_->stats(); }
  MemoryCache& cache() const { return *cache_; }

 private:
  std::shared_ptr<const Dataset> source_;
  std::unique_ptr<MemoryCache> cache_;
};

}  // namespace loom::data
