/*
 * Allocators. Memory for tensor storage comes from the allocator registered for its
 * device type. The CPU allocator returns 64-byte-aligned blocks and caches freed blocks by
 * size class, so that a training step re-uses the buffers of the previous one instead of
 * returning them to the OS and page-faulting them back in (on the reference VM each fresh
 * 4 KiB page costs ~2 µs: glibc's trimming made PyTorch's conv layers 5.7x slower).
 * The CUDA caching allocator lives in core/cuda and registers itself when CUDA is built.
 */
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device.h"

namespace loom {

struct AllocatorStats {
  size_t allocated_bytes = 0;       // in live blocks (rounded to their size class)
  size_t reserved_bytes = 0;        // live + cached
  size_t peak_allocated_bytes = 0;  // high-water mark of allocated_bytes
  uint64_t num_allocs = 0;          // calls to allocate
  uint64_t num_cache_hits = 0;      // of which served from the cache
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  // Returns every cached (free) block to the system.
  virtual void empty_cache() = 0;
};

// The allocator for a device type; throws loom::Error if none is registered (CUDA without
// the CUDA backend).
Allocator* get_allocator(DeviceType type);
void set_allocator(DeviceType type, Allocator* allocator);

Allocator* cpu_allocator();

// Upper bound of bytes the CPU allocator keeps cached (default 4 GiB); blocks freed beyond it
// go back to the system.
void set_cpu_cache_limit(size_t bytes);

}  // namespace loom
