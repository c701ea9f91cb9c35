/*
 * Counters every cache in the data layer reports (the sample cache, the decoded-block cache
 * of HDF5 datasets, the disk cache), so that hit rates can be printed the same way.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>

namespace loom::data {

struct CacheStats {
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t evictions = 0;
  int64_t entries = 0;        // held now
  size_t bytes = 0;           // held now
  size_t capacity_bytes = 0;  // the budget

  int64_t lookups() const { return hits + misses; }
  double hit_rate() const {
    return lookups() == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(lookups());
  }
};

inline std::ostream& operator<<(std::ostream& os, const CacheStats& s) {
  return os << "hits " << s.hits << ", misses " << s.misses << " (hit rate " << s.hit_rate() * 100 << "%), "
            << s.entries << " entries, " << s.bytes << " of " << s.capacity_bytes << " bytes, " << s.evictions
            << " evictions";
}

}  // namespace loom::data
