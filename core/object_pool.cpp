/* Per-thread free lists of small blocks (see object_pool.h). */
#include "core/object_pool.h"

#include <array>
#include <vector>

namespace loom::pool {

namespace {

constexpr size_t kClasses = kMaxPooledBytes / kGranule;
constexpr size_t kMaxCachedPerClass = 8192;

struct ThreadCache {
  std::array<std::vector<void*>, kClasses> free;
  ~ThreadCache() {
    for (auto& list : free)
      for (void* p : list) ::operator delete(p);
  }
};

// Null once the thread's cache has been destroyed (objects freed during thread exit).
thread_local ThreadCache* cache = nullptr;
thread_local bool cache_destroyed = false;

ThreadCache* thread_cache() {
  if (!cache && !cache_destroyed) {
    thread_local struct Holder {
      ThreadCache c;
      Holder() { cache = &c; }
      ~Holder() {
        cache = nullptr;
        cache_destroyed = true;
      }
    } holder;
  }
  return cache;
}

size_t class_of(size_t bytes) { return (bytes + kGranule - 1) / kGranule - 1; }

}  // namespace

void* allocate(size_t bytes) {
  if (bytes == 0 || bytes > kMaxPooledBytes) return ::operator new(bytes);
  size_t cls = class_of(bytes);
  if (ThreadCache* c = thread_cache(); c && !c->free[cls].empty()) {
    void* p = c->free[cls].back();
    c->free[cls].pop_back();
    return p;
  }
  return ::operator new((cls + 1) * kGranule);
}

void deallocate(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes == 0 || bytes > kMaxPooledBytes) {
    ::operator delete(p);
    return;
  }
  size_t cls = class_of(bytes);
  ThreadCache* c = thread_cache();
  if (c && c->free[cls].size() < kMaxCachedPerClass) {
    try {
      c->free[cls].push_back(p);
      return;
    } catch (...) {  // no memory to grow the list: give the block back instead
    }
  }
  ::operator delete(p);
}

}  // namespace loom::pool
