/*
 * CUDA device queries and device-memory management. Safe to call in any build: without the
 * CUDA backend, or on a machine without a driver or GPU, is_available() is false and
 * device_count() is 0. Asking for CUDA memory in those cases throws a loom::Error that says
 * why; the memory statistics are then all zero and empty_cache() does nothing.
 *
 * Device memory comes from the caching allocator (core/cuda/caching_allocator.h): freed
 * blocks stay reserved for reuse, so memory_reserved() is usually above memory_allocated(),
 * and nvidia-smi shows the reserved amount. empty_cache() gives the unused part back.
 * Streams and events are in core/cuda/stream.h (CUDA builds only); this header names a
 * stream by its runtime handle so that it needs no CUDA header.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

struct CUstream_st;  // the CUDA runtime's stream type: cudaStream_t is CUstream_st*

namespace loom {
class Allocator;
}

namespace loom::cuda {

// A CUDA stream handle (cudaStream_t); nullptr is the legacy default stream.
using StreamHandle = CUstream_st*;

// True when Loom was built with CUDA and at least one GPU can be used.
bool is_available();
int device_count();

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;          // compute capability
  size_t total_memory = 0;           // bytes
  int multiprocessor_count = 0;
};
// Throws loom::Error when the device does not exist.
DeviceProperties get_device_properties(int device);

// Blocks until all work queued on the current device has finished. Throws loom::Error when a
// kernel among that work met invalid input (a class or an index out of range): such checks run on
// the GPU and are reported at the host's next wait for it, this one or a copy to the host
// (core/cuda/device_checks.h).
void synchronize();

// Blocking checks: each op that checks its input on the GPU waits for that check and throws at
// the op, instead of at the next synchronisation (as CUDA_LAUNCH_BLOCKING=1 localises PyTorch's
// device-side asserts). Slower: meant for finding the call that passed bad input. Off by default;
// LOOM_CUDA_BLOCKING_CHECKS=1 in the environment turns it on. Without CUDA there are no such
// checks, and the setting changes nothing.
void set_blocking_checks(bool blocking);
bool blocking_checks();

// ---- device memory (the caching allocator) ---------------------------------------------

struct MemoryStats {
  size_t allocated_bytes = 0;        // in live blocks (each rounded up to a multiple of 512)
  size_t requested_bytes = 0;        // what the live allocations asked for (before rounding)
  size_t reserved_bytes = 0;         // in segments obtained with cudaMalloc (live + cached)
  size_t peak_allocated_bytes = 0;   // high-water mark of allocated_bytes
  size_t peak_reserved_bytes = 0;    // high-water mark of reserved_bytes
  size_t pending_free_bytes = 0;     // freed, but waiting for other streams' work (record_stream)
  uint64_t num_allocs = 0;           // calls to allocate (non-empty ones)
  uint64_t num_cache_hits = 0;       // of which served from a cached block, without cudaMalloc
  uint64_t num_segments = 0;         // segments held now
  uint64_t num_cuda_mallocs = 0;     // cudaMalloc calls that succeeded
  uint64_t num_cuda_frees = 0;       // segments given back with cudaFree
  uint64_t num_splits = 0;           // a cached block cut in two to serve a smaller request
  uint64_t num_merges = 0;           // a freed block joined with a free neighbour
  uint64_t num_ooms = 0;             // allocations that failed even after emptying the cache
};

// Statistics of the device allocator (all zero without CUDA).
MemoryStats memory_stats();
size_t memory_allocated();      // = memory_stats().allocated_bytes
size_t memory_reserved();       // = memory_stats().reserved_bytes
size_t max_memory_allocated();  // = memory_stats().peak_allocated_bytes
// Restarts the peaks at the current values.
void reset_peak_memory_stats();

// Gives every cached segment that holds no live block back to the driver (cudaFree), after
// waiting for the streams that still use freed blocks (record_stream). Tensors stay valid.
void empty_cache();

// Marks the device memory that `data` points into (any address inside a live tensor's
// storage, e.g. tensor.data_ptr()) as used by work queued on `stream`. When the storage is
// freed, its block is not handed out again until the work queued on `stream` up to that
// moment has finished. Needed only when a tensor allocated on one stream is used on another
// (a copy stream, a communication stream). Throws loom::Error when `data` is not memory of
// the CUDA caching allocator; without CUDA, always throws.
void record_stream(const void* data, StreamHandle stream);

// The pinned (page-locked) host memory pool: cudaHostAlloc blocks cached by size class, for
// staging asynchronous host<->device copies. device() is kCPU. A block may be returned while
// a copy from it is still queued only if the caller keeps its own event (the pool does not
// wait for copies). Without the CUDA backend this throws loom::Error; without a GPU, its
// allocate() does.
Allocator* host_allocator();

}  // namespace loom::cuda
