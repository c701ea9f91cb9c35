/*
 * The CPU caching allocator (see allocator.h).
 *
 * Size classes: requests are rounded up to 4 steps per power of two (at most 25% waste,
 * 64-byte minimum), and each class has a free list. A freed block goes on its list unless
 * the cache is over its limit. Large blocks are 2 MiB-aligned and advised as huge pages, so
 * that a fresh 64 MiB buffer costs 32 faults rather than 16384.
 */
#include "core/allocator.h"

#include <sys/mman.h>

#include <array>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "core/error.h"

namespace loom {

namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeThreshold = size_t{4} << 20;

size_t size_class(size_t n) {
  if (n <= kAlignment) return kAlignment;
  size_t top = std::bit_floor(n);
  if (top < 4 * kAlignment) return (n + kAlignment - 1) / kAlignment * kAlignment;
  size_t step = top / 4;
  return (n + step - 1) / step * step;
}

class CpuCachingAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.num_allocs;
      std::vector<void*>& blocks = free_list(cls);
      if (!blocks.empty()) {
        void* p = blocks.back();
        blocks.pop_back();
        cached_bytes_ -= cls;
        ++stats_.num_cache_hits;
        note_allocated(cls);
        return p;
      }
    }
    void* p = system_allocate(cls);
    std::lock_guard<std::mutex> lock(mutex_);
    note_allocated(cls);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (!ptr) return;
    size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.allocated_bytes -= cls;
      if (cached_bytes_ + cls <= cache_limit_) {
        free_list(cls).push_back(ptr);
        cached_bytes_ += cls;
        return;
      }
    }
    std::free(ptr);
  }

  Device device() const override { return kCPU; }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + cached_bytes_;
    return s;
  }

  void empty_cache() override {
    std::unordered_map<size_t, std::vector<void*>> released;
    std::array<std::vector<void*>, kSmallClasses> released_small;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      released.swap(free_);
      released_small.swap(free_small_);
      cached_bytes_ = 0;
    }
    for (auto& [cls, blocks] : released)
      for (void* p : blocks) std::free(p);
    for (auto& blocks : released_small)
      for (void* p : blocks) std::free(p);
  }

  void set_cache_limit(size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    cache_limit_ = bytes;
  }

 private:
  static void* system_allocate(size_t cls) {
    size_t align = cls >= kHugeThreshold ? kHugePage : kAlignment;
    size_t bytes = (cls + align - 1) / align * align;
    void* p = std::aligned_alloc(align, bytes);
    if (!p) throw Error(detail::concat("out of CPU memory: could not allocate ", cls, " bytes"));
    if (align == kHugePage) madvise(p, bytes, MADV_HUGEPAGE);  // advisory: failure is harmless
    return p;
  }

  void note_allocated(size_t cls) {
    stats_.allocated_bytes += cls;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) stats_.peak_allocated_bytes = stats_.allocated_bytes;
  }

  // Blocks of up to 4 x 64 bytes (scalars, tiny tensors: the most frequent) are found by
  // index instead of by hashing.
  static constexpr size_t kSmallClasses = 4;
  std::vector<void*>& free_list(size_t cls) {
    return cls <= kSmallClasses * kAlignment ? free_small_[cls / kAlignment - 1] : free_[cls];
  }

  mutable std::mutex mutex_;
  std::array<std::vector<void*>, kSmallClasses> free_small_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_bytes_ = 0;
  size_t cache_limit_ = size_t{4} << 30;
  AllocatorStats stats_;
};

CpuCachingAllocator& cpu_caching_allocator() {
  // Never destroyed: tensors held in static objects may be freed after main returns.
  static auto* instance = new CpuCachingAllocator();
  return *instance;
}

}  // namespace

#if LOOM_WITH_CUDA
namespace cuda {
Allocator* device_allocator();  // core/cuda/cuda_device.cpp
}
#endif

namespace {
std::array<Allocator*, kNumDeviceTypes>& registry() {
#if LOOM_WITH_CUDA
  static std::array<Allocator*, kNumDeviceTypes> allocators{&cpu_caching_allocator(), cuda::device_allocator()};
#else
  static std::array<Allocator*, kNumDeviceTypes> allocators{&cpu_caching_allocator(), nullptr};
#endif
  return allocators;
}
}  // namespace

Allocator* cpu_allocator() { return &cpu_caching_allocator(); }

void set_cpu_cache_limit(size_t bytes) { cpu_caching_allocator().set_cache_limit(bytes); }

Allocator* get_allocator(DeviceType type) {
  Allocator* a = registry()[static_cast<int>(type)];
  LOOM_CHECK(a != nullptr, "no allocator for device type ",
             type == DeviceType::CUDA ? "cuda: Loom was built without the CUDA backend" : "cpu");
  return a;
}

void set_allocator(DeviceType type, Allocator* allocator) { registry()[static_cast<int>(type)] = allocator; }

}  // namespace loom
