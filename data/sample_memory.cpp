/* Per-sample tensors from a per-thread block cache (see sample_memory.h). */
#include "data/sample_memory.h"

#include <array>
#include <cstdlib>
#include <new>
#include <vector>

namespace loom::data {

namespace {

constexpr size_t kAlign = 64;
constexpr size_t kMaxCached = size_t{16} << 10;  // larger blocks go straight to malloc
constexpr size_t kClasses = kMaxCached / kAlign;
constexpr size_t kPerClass = 256;  // blocks kept per size class and thread

// Free blocks of this thread by size class (multiples of 64 bytes); returned to malloc when
// the thread ends.
struct ThreadCache {
  std::array<std::vector<void*>, kClasses> free;
  ~ThreadCache() {
    for (auto& list : free)
      for (void* p : list) std::free(p);
  }
};

ThreadCache& cache() {
  thread_local ThreadCache c;
  return c;
}

size_t rounded(size_t bytes) {
  return std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
}

void* take(size_t size) {
  if (size <= kMaxCached) {
    auto& list = cache().free[size / kAlign - 1];
    if (!list.empty()) {
      void* p = list.back();
      list.pop_back();
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (!p) throw std::bad_alloc();
  return p;
}

void give_back(void* p, size_t size) {
  if (size <= kMaxCached) {
    auto& list = cache().free[size / kAlign - 1];
    if (list.size() < kPerClass) {
      list.push_back(p);
      return;
    }
  }
  std::free(p);
}

}  // namespace

Tensor sample_tensor(IntArrayRef sizes, DType dtype) {
  const size_t size = rounded(static_cast<size_t>(shape_numel(sizes)) * dtype_size(dtype));
  return from_blob(take(size), sizes, dtype, [size](void* p) { give_back(p, size); });
}

}  // namespace loom::data
