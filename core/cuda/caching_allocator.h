/*
 * The CUDA caching allocator, after PyTorch's CUDACachingAllocator.
 *
 * cudaMalloc and cudaFree are slow and cudaFree synchronises the whole device, so device
 * memory is obtained in segments and kept: a freed block goes back to a free pool and serves
 * the next request of a fitting size, without any CUDA call.
 *
 *   sizes      requests are rounded up to a multiple of 512 bytes (kMinBlockSize);
 *   segments   requests up to 1 MiB come from 2 MiB segments ("small" pool); larger ones from
 *              a segment of 20 MiB when they are under 10 MiB, else of the request rounded up
 *              to 2 MiB ("large" pool);
 *   best fit   each pool is a set ordered by (stream, size, address): lower_bound finds the
 *              smallest free block of the request's stream that is large enough;
 *   splitting  a block larger than the request is cut in two when the rest is worth keeping
 *              (>= 512 B in the small pool, > 1 MiB in the large one);
 *   merging    a freed block joins its free neighbours of the same segment, so a segment
 *              whose blocks are all free is again one block (and can be given back);
 *   streams    a block belongs to the stream it was allocated on (the thread's current
 *              stream) and returns to that stream's pool, so work on that stream may reuse it
 *              at once: the stream's own order makes the old work finish first. A block that
 *              other streams used (record_stream) is parked at free time behind one event per
 *              such stream and enters the pool only when those events have completed;
 *   OOM        a failed cudaMalloc gives every cached segment back (empty_cache) and retries
 *              once, then throws loom::Error naming the request and the statistics;
 *   graphs     while a stream is captured into a CUDA graph (core/cuda_graph.h), its
 *              allocations come from that graph's private pool (PyTorch's graph pools): the
 *              graph's replays write to those addresses, so no allocation outside the pool may
 *              receive them while the graph lives. Blocks freed during or after the capture go
 *              back to the private pool, where the capture itself reuses them in stream order.
 *              A released pool's segments are given back (cudaFree) once none of its blocks is
 *              live. During a capture the allocator makes no call a capture forbids: cudaMalloc
 *              runs in relaxed capture mode (it is not stream work), and neither events are
 *              queried nor segments freed until the capture ends.
 *
 * In the emulated ASan build every byte of a segment that no live allocation asked for (free
 * blocks, and the tail between the request and its rounded block size) is poisoned, so a
 * kernel that writes past its tensor is reported even though the segment is mapped. A graph
 * pool's blocks are the exception once handed out: its replays still write the tensors that
 * the capture freed.
 *
 * One allocator serves the current device (Loom uses device 0). Thread-safe: one mutex.
 * This header is internal to core (and the tests); users see core/cuda.h.
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/cuda.h"

namespace loom::cuda {

class CudaCachingAllocator final : public Allocator {
 public:
  static constexpr size_t kMinBlockSize = 512;            // every size is rounded to this
  static constexpr size_t kSmallSize = size_t{1} << 20;   // largest request of the small pool
  static constexpr size_t kSmallBuffer = size_t{2} << 20; // segment size of the small pool
  static constexpr size_t kLargeBuffer = size_t{20} << 20;  // segment for 1-10 MiB requests
  static constexpr size_t kMinLargeAlloc = size_t{10} << 20;
  static constexpr size_t kRoundLarge = size_t{2} << 20;  // larger segments: multiples of this

  CudaCachingAllocator() = default;
  ~CudaCachingAllocator() override;  // gives back the free segments (live ones are leaked)
  CudaCachingAllocator(const CudaCachingAllocator&) = delete;
  CudaCachingAllocator& operator=(const CudaCachingAllocator&) = delete;

  // Serves nbytes on the calling thread's current stream. Throws loom::Error without a GPU
  // and when the device is out of memory.
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  Device device() const override { return Device::cuda(0); }
  AllocatorStats stats() const override;
  void empty_cache() override;

  MemoryStats memory_stats() const;
  void reset_peak_stats();
  // See loom::cuda::record_stream.
  void record_stream(const void* ptr, cudaStream_t stream);

  // CUDA graph memory pools. A pool id names a private pool (0 is the shared one).
  using PoolId = uint64_t;
  PoolId create_pool();
  // Until end_allocate_to_pool, allocations on `stream` come from `pool`.
  void begin_allocate_to_pool(PoolId pool, cudaStream_t stream);
  void end_allocate_to_pool(PoolId pool);
  // The pool's graph is gone: its segments are given back once none of their blocks is live.
  void release_pool(PoolId pool);

  // Test hook: while set, an event query asks this function instead of cudaEventQuery, so
  // that a test can hold a recorded event "not yet complete" (the emulator completes every
  // event when it is recorded). Synchronising (empty_cache) still waits with the real call.
  void set_event_query_for_testing(std::function<cudaError_t(cudaEvent_t)> query);

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t rounded);

 private:
  struct Block;
  struct BlockOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockOrder>;
  struct PendingEvent {
    cudaEvent_t event;
    Block* block;
  };

  static Block* new_block(char* ptr, size_t size, cudaStream_t stream, bool small);
  Pool& pool_for(size_t rounded) { return rounded <= kSmallSize ? small_pool_ : large_pool_; }
  Block* find_free_block(Pool& pool, PoolId owner, cudaStream_t stream, size_t rounded);
  Block* new_segment(Pool& pool, PoolId owner, cudaStream_t stream, size_t rounded, size_t nbytes);
  bool capturing() const { return !capturing_.empty(); }
  bool released(PoolId owner) const;
  void free_segment(Block* block);  // a whole free segment, out of its pool set, to cudaFree
  bool should_split(const Block* block, size_t rounded) const;
  void free_block(Block* block);  // into its pool, merged with free neighbours
  bool merge(Block* dst, Block* src);
  void insert_events(Block* block);
  void process_events();          // non-blocking: completed events release their blocks
  void synchronize_events();      // waits for every outstanding event
  void release_cached_segments(); // mutex held
  [[noreturn]] void throw_oom(size_t nbytes, size_t rounded, size_t alloc_size, cudaError_t status);
  static void mark(const void* p, size_t n, bool usable);

  mutable std::mutex mutex_;
  Pool small_pool_, large_pool_;
  std::map<uintptr_t, Block*> live_;       // allocated blocks by address
  std::vector<PendingEvent> pending_;      // in the order recorded
  std::vector<Block*> deferred_;           // freed during a capture with other streams' uses
  std::set<PoolId> pools_;                 // private pools whose graph still lives
  std::map<cudaStream_t, PoolId> capturing_;  // streams whose allocations go to a private pool
  PoolId next_pool_ = 1;
  std::function<cudaError_t(cudaEvent_t)> query_for_testing_;
  MemoryStats stats_;
};

// The process's device allocator (the one registered for DeviceType::CUDA); never destroyed,
// because storages may be freed after main returns.
CudaCachingAllocator& caching_allocator();

}  // namespace loom::cuda
