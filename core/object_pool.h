/*
 * A per-thread pool for the small objects created on every op: tensor and storage handles,
 * autograd nodes and metadata. A training step makes thousands of them and frees them all a
 * moment later (the graph dies after backward); glibc's per-thread cache holds only 7 blocks
 * per size, so most of those calls would fall through to its slower bins. Here freed blocks
 * wait on a per-thread free list (by 64-byte size class, up to a cap) for the next object.
 * A block freed on another thread simply joins that thread's list.
 *
 *   std::allocate_shared<TensorImpl>(PoolAllocator<TensorImpl>(), ...)
 */
#pragma once

#include <cstddef>
#include <new>

namespace loom {

namespace pool {
constexpr size_t kGranule = 64;
constexpr size_t kMaxPooledBytes = 1024;  // larger objects go straight to operator new
void* allocate(size_t bytes);
void deallocate(void* p, size_t bytes) noexcept;
}  // namespace pool

template <class T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT: rebinding, as std::allocator
  T* allocate(size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "PoolAllocator: over-aligned type");
    return static_cast<T*>(pool::allocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { pool::deallocate(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

// Gives a class pooled operator new/delete (for objects made with new / make_unique).
#define LOOM_POOL_ALLOCATED                                                                   \
  static void* operator new(size_t bytes) { return ::loom::pool::allocate(bytes); }           \
  static void operator delete(void* p, size_t bytes) noexcept { ::loom::pool::deallocate(p, bytes); }

}  // namespace loom
