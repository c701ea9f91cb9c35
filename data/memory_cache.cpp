/* The sharded CLOCK sample cache (see memory_cache.h). */
#include "data/memory_cache.h"

#include <algorithm>

namespace loom::data {

MemoryCache::MemoryCache(size_t capacity_bytes, int64_t num_keys)
    : capacity_(capacity_bytes),
      num_keys_(num_keys),
      slots_(static_cast<size_t>(std::max<int64_t>(num_keys, 0))) {
  LOOM_CHECK(num_keys >= 0, "MemoryCache: ", num_keys, " keys");
}

size_t MemoryCache::bytes_of(const Example& example) {
  size_t n = 0;
  if (example.data.defined()) n += example.data.nbytes();
  if (example.target.defined()) n += example.target.nbytes();
  return n;
}

MemoryCache::Slot& MemoryCache::slot(int64_t key) {
  check_index(key, num_keys_, "MemoryCache");
  return slots_[static_cast<size_t>(key)];
}

std::optional<Example> MemoryCache::lookup(int64_t key) {
  Slot& e = slot(key);
  Shard& s = shard(key);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!e.present) {
    ++s.misses;
    return std::nullopt;
  }
  ++s.hits;
  e.referenced = true;
  return e.example;
}

void MemoryCache::evict_one(Shard& s) {
  // Each pass of the hand clears referenced bits, so this ends within two passes.
  while (true) {
    if (s.hand >= s.resident.size()) s.hand = 0;
    Slot& e = slots_[static_cast<size_t>(s.resident[s.hand])];
    if (e.referenced) {
      e.referenced = false;
      ++s.hand;
      continue;
    }
    s.bytes -= e.bytes;
    e = Slot();
    s.resident.erase(s.resident.begin() +
                     static_cast<std::ptrdiff_t>(s.hand));  // the hand moves on to the next
    ++s.evictions;
    return;
  }
}

void MemoryCache::insert(int64_t key, const Example& example) {
  const size_t budget = capacity_ / kShards;
  const size_t bytes = bytes_of(example);
  Slot& e = slot(key);
  Shard& s = shard(key);
  std::lock_guard<std::mutex> lock(s.mutex);
  if (e.present) {  // a replacement: take the old one out first
    s.bytes -= e.bytes;
    auto pos = std::find(s.resident.begin(), s.resident.end(), key);
    if (static_cast<size_t>(pos - s.resident.begin()) < s.hand) --s.hand;
    s.resident.erase(pos);
    e = Slot();
  }
  if (bytes > budget) return;
  while (s.bytes + bytes > budget) evict_one(s);
  e.example = example;
  e.bytes = bytes;
  e.present = true;
  e.referenced = false;  // a second chance is earned by a hit
  // Inserted just behind the hand, so the hand reaches it last. Inserting and evicting move
  // the keys after it (a memmove of a few thousand integers): misses only, which cost a read
  // of the source anyway.
  if (s.hand > s.resident.size()) s.hand = s.resident.size();
  s.resident.insert(s.resident.begin() + static_cast<std::ptrdiff_t>(s.hand), key);
  ++s.hand;
  s.bytes += bytes;
}

void MemoryCache::clear() {
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (int64_t key : s.resident) slots_[static_cast<size_t>(key)] = Slot();
    s.resident.clear();
    s.hand = 0;
    s.bytes = 0;
  }
}

CacheStats MemoryCache::stats() const {
  CacheStats total;
  total.capacity_bytes = capacity_;
  for (const Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mutex);
    total.hits += s.hits;
    total.misses += s.misses;
    total.evictions += s.evictions;
    total.entries += static_cast<int64_t>(s.resident.size());
    total.bytes += s.bytes;
  }
  return total;
}

CachedDataset::CachedDataset(std::shared_ptr<const Dataset> source, size_t capacity_bytes)
    : source_(std::move(source)) {
  LOOM_CHECK(source_ != nullptr, "CachedDataset: null source dataset");
  cache_ = std::make_unique<MemoryCache>(capacity_bytes, source_->size());
}

Example CachedDataset::get(int64_t index) const {
  check_index(index, source_->size(), "CachedDataset");
  if (auto hit = cache_->lookup(index)) return *hit;
  Example e = source_->get(index);
  cache_->insert(index, e);
  return e;
}

}  // namespace loom::data
