/*
 * The CUDA caching allocator and the pinned host-memory pool (see caching_allocator.h for
 * the design; PyTorch's c10/cuda/CUDACachingAllocator.cpp is the model).
 */
#include "core/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>

#include "core/cuda/cuda_check.h"
#include "core/cuda/stream.h"
#include "core/error.h"

#ifdef LOOM_CUDA_EMULATED  // defined by the emulator's cuda_runtime_api.h
#include "core/cuda/emulated/emulator.h"
#endif

namespace loom::cuda {

namespace {

std::string format_bytes(size_t n) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char text[32];
  if (u == 0) {
    std::snprintf(text, sizeof text, "%zu bytes", n);
  } else {
    std::snprintf(text, sizeof text, "%.2f %s", v, units[u]);
  }
  return text;
}

}  // namespace

// One block of device memory: a whole segment, or a piece of one after splitting. The blocks
// of a segment form a doubly linked list in address order.
struct CudaCachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;               // rounded bytes
  size_t requested = 0;          // bytes asked for, while allocated
  cudaStream_t stream = nullptr; // the stream whose pool owns it (the segment's stream)
  PoolId owner = 0;              // the private (graph) pool of its segment; 0: the shared one
  bool small = false;            // which pool
  bool allocated = false;
  int event_count = 0;           // outstanding events before it may be reused
  Block* prev = nullptr;
  Block* next = nullptr;
  std::vector<cudaStream_t> stream_uses;  // other streams that used it (record_stream)
};

bool CudaCachingAllocator::BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->owner != b->owner) return a->owner < b->owner;
  auto sa = reinterpret_cast<uintptr_t>(a->stream), sb = reinterpret_cast<uintptr_t>(b->stream);
  if (sa != sb) return sa < sb;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
}

CudaCachingAllocator::Block* CudaCachingAllocator::new_block(char* ptr, size_t size, cudaStream_t stream, bool small) {
  auto* block = new Block();
  block->ptr = ptr;
  block->size = size;
  block->stream = stream;
  block->small = small;
  return block;
}

size_t CudaCachingAllocator::round_size(size_t nbytes) {
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CudaCachingAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

void CudaCachingAllocator::mark(const void* p, size_t n, bool usable) {
#ifdef LOOM_CUDA_EMULATED
  if (n > 0) loom_emu::mark_device_bytes(p, n, usable);
#else
  (void)p, (void)n, (void)usable;
#endif
}

CudaCachingAllocator::~CudaCachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_segments();
}

void* CudaCachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  LOOM_CHECK(device_count() > 0, "cuda: cannot allocate ", nbytes,
             " bytes: no CUDA device is available (no driver or no GPU on this machine)");
  const cudaStream_t stream = current_stream().handle();
  const size_t rounded = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_allocs;
  // Blocks whose other-stream work has finished become available; not during a capture, whose
  // events a query may not touch (the deferred ones are handled when it ends).
  if (!capturing()) process_events();
  const auto capture = capturing_.find(stream);
  const PoolId owner = capture == capturing_.end() ? 0 : capture->second;
  Pool& pool = pool_for(rounded);
  Block* block = find_free_block(pool, owner, stream, rounded);
  if (block) {
    ++stats_.num_cache_hits;
  } else {
    block = new_segment(pool, owner, stream, rounded, nbytes);
  }
  if (should_split(block, rounded)) {
    auto* rest = new_block(block->ptr + rounded, block->size - rounded, stream, block->small);
    rest->owner = block->owner;
    rest->prev = block;
    rest->next = block->next;
    if (rest->next) rest->next->prev = rest;
    block->next = rest;
    block->size = rounded;
    pool.insert(rest);
    ++stats_.num_splits;
  }
  block->allocated = true;
  block->requested = nbytes;
  live_[reinterpret_cast<uintptr_t>(block->ptr)] = block;
  stats_.allocated_bytes += block->size;
  stats_.requested_bytes += nbytes;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  if (block->owner == 0) {
    mark(block->ptr, nbytes, true);
    mark(block->ptr + nbytes, block->size - nbytes, false);  // the rounding tail stays poisoned
  } else {
    // A graph pool's bytes stay usable once handed out: the graph's replays write every tensor
    // its capture made, the ones freed during the capture included, where they were.
    mark(block->ptr, block->size, true);
  }
  return block->ptr;
}

CudaCachingAllocator::Block* CudaCachingAllocator::find_free_block(Pool& pool, PoolId owner,
                                                                   cudaStream_t stream, size_t rounded) {
  Block key;
  key.owner = owner;
  key.stream = stream;
  key.size = rounded;
  auto it = pool.lower_bound(&key);  // the smallest block of this pool and stream that is large enough
  if (it == pool.end() || (*it)->owner != owner || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

CudaCachingAllocator::Block* CudaCachingAllocator::new_segment(Pool& pool, PoolId owner, cudaStream_t stream,
                                                               size_t rounded, size_t nbytes) {
  const size_t size = segment_size(rounded);
  void* p = nullptr;
  cudaError_t status;
  {
    RelaxedCaptureMode relaxed;  // cudaMalloc is not stream work: a capture neither records nor needs it
    status = cudaMalloc(&p, size);
    if (status == cudaErrorMemoryAllocation && !capturing()) {  // no segment is freed during a capture
      (void)cudaGetLastError();                                 // clear it: the retry decides
      // The cached segments of every stream may add up to what is missing: give them back.
      release_cached_segments();
      status = cudaMalloc(&p, size);
    }
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    ++stats_.num_ooms;
    throw_oom(nbytes, rounded, size, status);
  }
  LOOM_CUDA_CHECK(status);
  auto* block = new_block(static_cast<char*>(p), size, stream, &pool == &small_pool_);
  block->owner = owner;
  mark(p, size, false);  // nothing in a fresh segment is allocated yet
  ++stats_.num_cuda_mallocs;
  ++stats_.num_segments;
  stats_.reserved_bytes += size;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return block;
}

void CudaCachingAllocator::throw_oom(size_t nbytes, size_t rounded, size_t alloc_size, cudaError_t status) {
  size_t free = 0, total = 0;
  std::string device_memory;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
    device_memory = "; the device has " + format_bytes(total) + " in total, of which " + format_bytes(free) + " free";
  } else {
    (void)cudaGetLastError();
  }
  const size_t cached = stats_.reserved_bytes - stats_.allocated_bytes;
  LOOM_FAIL("CUDA out of memory: tried to allocate ", format_bytes(nbytes), " (", nbytes, " bytes, rounded to ",
            rounded, " in a new segment of ", alloc_size, " bytes) on device 0; allocated ",
            format_bytes(stats_.allocated_bytes), ", reserved ", format_bytes(stats_.reserved_bytes), " (",
            format_bytes(cached), " cached in free blocks), peak allocated ",
            format_bytes(stats_.peak_allocated_bytes), device_memory, " (", cudaGetErrorName(status),
            "). The cached segments were given back and the allocation retried; free tensors that are no "
            "longer needed or use smaller batches");
}

bool CudaCachingAllocator::should_split(const Block* block, size_t rounded) const {
  const size_t remaining = block->size - rounded;
  return block->small ? remaining >= kMinBlockSize : remaining > kSmallSize;
}

void CudaCachingAllocator::deallocate(void* ptr, size_t nbytes) {
  (void)nbytes;  // the block knows its size
  if (!ptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == live_.end()) {
    // Called from destructors: report instead of throwing (a double free or a foreign pointer).
    std::fprintf(stderr, "loom cuda: deallocate of %p, which is not a live block of the caching allocator\n", ptr);
    return;
  }
  Block* block = it->second;
  live_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= block->size;
  stats_.requested_bytes -= block->requested;
  block->requested = 0;
  if (block->owner == 0) mark(block->ptr, block->size, false);  // see allocate for graph pools
  if (block->stream_uses.empty()) {
    free_block(block);
  } else if (capturing()) {
    deferred_.push_back(block);  // its events would be recorded into the capture: they wait for its end
  } else {
    insert_events(block);
  }
}

void CudaCachingAllocator::insert_events(Block* block) {
  for (cudaStream_t stream : block->stream_uses) {
    // The event completes when the work queued on `stream` so far (the last use) has.
    cudaEvent_t event = nullptr;
    if (cudaEventCreateWithFlags(&event, cudaEventDisableTiming) != cudaSuccess ||
        cudaEventRecord(event, stream) != cudaSuccess) {
      // Cannot track this stream's work (deallocate must not throw): wait for all of it now.
      (void)cudaGetLastError();
      if (event) (void)cudaEventDestroy(event);
      (void)cudaDeviceSynchronize();
      continue;
    }
    pending_.push_back({event, block});
    ++block->event_count;
  }
  block->stream_uses.clear();
  if (block->event_count == 0) {
    free_block(block);
  } else {
    stats_.pending_free_bytes += block->size;
  }
}

void CudaCachingAllocator::process_events() {
  size_t kept = 0;
  for (PendingEvent& pending : pending_) {
    cudaError_t status = query_for_testing_ ? query_for_testing_(pending.event) : cudaEventQuery(pending.event);
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();  // "not ready" is an answer, not a sticky error
      pending_[kept++] = pending;
      continue;
    }
    // Completed (or failed: an event that cannot be queried cannot protect anything either).
    if (status != cudaSuccess) (void)cudaGetLastError();
    (void)cudaEventDestroy(pending.event);
    if (--pending.block->event_count == 0) {
      stats_.pending_free_bytes -= pending.block->size;
      free_block(pending.block);
    }
  }
  pending_.resize(kept);
}

void CudaCachingAllocator::synchronize_events() {
  for (PendingEvent& pending : pending_) {
    // Waits for the work that the other stream queued before the block was freed.
    if (cudaEventSynchronize(pending.event) != cudaSuccess) (void)cudaGetLastError();
    (void)cudaEventDestroy(pending.event);
    if (--pending.block->event_count == 0) {
      stats_.pending_free_bytes -= pending.block->size;
      free_block(pending.block);
    }
  }
  pending_.clear();
}

void CudaCachingAllocator::free_block(Block* block) {
  Pool& pool = block->small ? small_pool_ : large_pool_;
  for (Block* neighbour : {block->prev, block->next}) {
    if (neighbour && !neighbour->allocated && neighbour->event_count == 0) {
      pool.erase(neighbour);  // before its address or size changes the set's order
      merge(block, neighbour);
    }
  }
  pool.insert(block);
  // The last block of a released graph pool's segment: the segment goes back to the driver.
  if (block->owner != 0 && released(block->owner) && !block->prev && !block->next && !capturing()) {
    pool.erase(block);
    free_segment(block);
  }
}

bool CudaCachingAllocator::released(PoolId owner) const {
  return owner != 0 && pools_.count(owner) == 0;
}

void CudaCachingAllocator::free_segment(Block* block) {
  // cudaFree waits for the device to finish, so no queued kernel (or graph) still uses the segment.
  if (cudaFree(block->ptr) != cudaSuccess) (void)cudaGetLastError();
  stats_.reserved_bytes -= block->size;
  --stats_.num_segments;
  ++stats_.num_cuda_frees;
  delete block;
}

bool CudaCachingAllocator::merge(Block* dst, Block* src) {
  if (src == dst->prev) {
    dst->ptr = src->ptr;
    dst->prev = src->prev;
    if (dst->prev) dst->prev->next = dst;
  } else {
    dst->next = src->next;
    if (dst->next) dst->next->prev = dst;
  }
  dst->size += src->size;
  delete src;
  ++stats_.num_merges;
  return true;
}

void CudaCachingAllocator::release_cached_segments() {
  if (capturing()) return;  // neither event waits nor cudaFree are allowed during a capture
  synchronize_events();
  for (Pool* pool : {&small_pool_, &large_pool_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      // Part of a segment that still has live blocks, or of a live graph's pool (its replays
      // write there).
      if (block->prev || block->next || (block->owner != 0 && !released(block->owner))) {
        ++it;
        continue;
      }
      it = pool->erase(it);
      free_segment(block);
    }
  }
}

CudaCachingAllocator::PoolId CudaCachingAllocator::create_pool() {
  std::lock_guard<std::mutex> lock(mutex_);
  const PoolId id = next_pool_++;
  pools_.insert(id);
  return id;
}

void CudaCachingAllocator::begin_allocate_to_pool(PoolId pool, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  LOOM_CHECK(pools_.count(pool) > 0, "cuda caching allocator: graph memory pool ", pool, " does not exist");
  LOOM_CHECK(capturing_.count(stream) == 0,
             "cuda caching allocator: the stream already allocates to a graph pool");
  capturing_[stream] = pool;
}

void CudaCachingAllocator::end_allocate_to_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = capturing_.begin(); it != capturing_.end();)
    it = it->second == pool ? capturing_.erase(it) : std::next(it);
  if (capturing()) return;
  std::vector<Block*> deferred;
  deferred.swap(deferred_);
  for (Block* block : deferred) insert_events(block);
}

void CudaCachingAllocator::release_pool(PoolId pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  pools_.erase(pool);
  if (capturing()) return;  // its free segments go at the next empty_cache or block free
  for (Pool* set : {&small_pool_, &large_pool_}) {
    for (auto it = set->begin(); it != set->end();) {
      Block* block = *it;
      if (block->owner != pool || block->prev || block->next) {
        ++it;
        continue;
      }
      it = set->erase(it);
      free_segment(block);
    }
  }
}

void CudaCachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached_segments();
}

void CudaCachingAllocator::record_stream(const void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = live_.upper_bound(address);
  Block* block = nullptr;
  if (it != live_.begin()) {
    --it;
    if (address < it->first + it->second->size) block = it->second;
  }
  LOOM_CHECK(block != nullptr, "cuda::record_stream: ", ptr,
             " is not inside a live allocation of the CUDA caching allocator (a CUDA tensor's data pointer "
             "was expected)");
  if (stream == block->stream) return;  // its own stream's order already protects it
  if (std::find(block->stream_uses.begin(), block->stream_uses.end(), stream) == block->stream_uses.end())
    block->stream_uses.push_back(stream);
}

AllocatorStats CudaCachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatorStats s;
  s.allocated_bytes = stats_.allocated_bytes;
  s.reserved_bytes = stats_.reserved_bytes;
  s.peak_allocated_bytes = stats_.peak_allocated_bytes;
  s.num_allocs = stats_.num_allocs;
  s.num_cache_hits = stats_.num_cache_hits;
  return s;
}

MemoryStats CudaCachingAllocator::memory_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CudaCachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CudaCachingAllocator::set_event_query_for_testing(std::function<cudaError_t(cudaEvent_t)> query) {
  std::lock_guard<std::mutex> lock(mutex_);
  query_for_testing_ = std::move(query);
}

// ---- pinned host memory ----------------------------------------------------------------

namespace {

// cudaHostAlloc is slower than cudaMalloc (it pins every page), so pinned blocks are cached
// by power-of-two size class. Blocks are never split: the sizes a data loader asks for repeat.
class CachingHostAllocator final : public Allocator {
 public:
  static size_t size_class(size_t nbytes) {
    size_t cls = 4096;  // a page: cudaHostAlloc pins whole pages anyway
    while (cls < nbytes) cls *= 2;
    return cls;
  }

  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    LOOM_CHECK(device_count() > 0, "cuda: cannot allocate ", nbytes,
               " bytes of pinned host memory: no CUDA device is available (no driver or no GPU)");
    const size_t cls = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.num_allocs;
    void* p = nullptr;
    auto& list = free_[cls];
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
      cached_ -= cls;
      ++stats_.num_cache_hits;
    } else {
      cudaError_t status = cudaHostAlloc(&p, cls, cudaHostAllocDefault);
      if (status == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        release_cached();  // other size classes may hold what is missing
        status = cudaHostAlloc(&p, cls, cudaHostAllocDefault);
      }
      if (status == cudaErrorMemoryAllocation) (void)cudaGetLastError();
      LOOM_CHECK(status != cudaErrorMemoryAllocation, "out of pinned host memory: tried to allocate ",
                 format_bytes(nbytes), " (", nbytes, " bytes); pinned in use ", format_bytes(stats_.allocated_bytes));
      LOOM_CUDA_CHECK(status);
    }
    live_[p] = cls;
    stats_.allocated_bytes += cls;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    (void)nbytes;
    if (!ptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(ptr);
    if (it == live_.end()) {
      std::fprintf(stderr, "loom cuda: deallocate of %p, which is not a live pinned block\n", ptr);
      return;
    }
    free_[it->second].push_back(ptr);
    cached_ += it->second;
    stats_.allocated_bytes -= it->second;
    live_.erase(it);
  }

  Device device() const override { return kCPU; }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    AllocatorStats s = stats_;
    s.reserved_bytes = s.allocated_bytes + cached_;
    return s;
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_cached();
  }

 private:
  void release_cached() {
    for (auto& [cls, list] : free_)
      for (void* p : list)
        if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
    free_.clear();
    cached_ = 0;
  }

  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, size_t> live_;
  size_t cached_ = 0;
  AllocatorStats stats_;
};

}  // namespace

Allocator* host_allocator() {
  static auto* allocator = new CachingHostAllocator();  // never destroyed: tensors may outlive main
  return allocator;
}

}  // namespace loom::cuda
