/*
 * The CUDA caching allocator (core/cuda/caching_allocator.h), streams and events
 * (core/cuda/stream.h) and the pinned host pool. Most cases use a private allocator so that
 * the statistics are exact; the last ones check that CUDA tensors go through the process's
 * allocator. The emulator completes events when they are recorded, so the stream-safety case
 * holds events "not ready" through the allocator's test hook.
 */
#include <doctest/doctest.h>

#if LOOM_WITH_CUDA  // the allocator and streams exist only in CUDA builds
#include <memory>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/stream.h"
#include "core/tensor.h"
#include "tests/gpu_test.h"

using namespace loom;
using namespace loom::cuda;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

char* alloc(CudaCachingAllocator& a, size_t n) { return static_cast<char*>(a.allocate(n)); }

}  // namespace

TEST_CASE("cuda allocator: a freed block is reused for the same size") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  void* q = a.allocate(1000);
  CHECK(q == p);
  MemoryStats s = a.memory_stats();
  CHECK(s.num_allocs == 2);
  CHECK(s.num_cache_hits == 1);
  CHECK(s.num_cuda_mallocs == 1);
  a.deallocate(q, 1000);
  CHECK(a.stats().allocated_bytes == 0);
}

TEST_CASE("cuda allocator: sizes are rounded to 512 bytes") {
  LOOM_REQUIRE_GPU();
  CHECK(CudaCachingAllocator::round_size(1) == 512);
  CHECK(CudaCachingAllocator::round_size(512) == 512);
  CHECK(CudaCachingAllocator::round_size(513) == 1024);
  CHECK(CudaCachingAllocator::segment_size(512) == 2 * kMiB);
  CHECK(CudaCachingAllocator::segment_size(kMiB) == 2 * kMiB);
  CHECK(CudaCachingAllocator::segment_size(kMiB + 512) == 20 * kMiB);
  CHECK(CudaCachingAllocator::segment_size(10 * kMiB) == 10 * kMiB);
  CHECK(CudaCachingAllocator::segment_size(10 * kMiB + 512) == 12 * kMiB);
  CudaCachingAllocator a;
  void* p1 = a.allocate(1);
  void* p2 = a.allocate(513);
  void* p3 = a.allocate(3000);
  MemoryStats s = a.memory_stats();
  CHECK(s.allocated_bytes == 512 + 1024 + 3072);
  CHECK(s.allocated_bytes % 512 == 0);
  CHECK(s.requested_bytes == 1 + 513 + 3000);
  a.deallocate(p2, 513);
  CHECK(a.stats().allocated_bytes == 512 + 3072);
  a.deallocate(p1, 1);
  a.deallocate(p3, 3000);
  CHECK(a.memory_stats().requested_bytes == 0);
  CHECK(a.allocate(0) == nullptr);
}

TEST_CASE("cuda allocator: small blocks are split from one 2 MiB segment") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  char* p = alloc(a, 1000);
  char* q = alloc(a, 4096);
  CHECK(q == p + 1024);  // the rest of the segment, after the first block
  MemoryStats s = a.memory_stats();
  CHECK(s.reserved_bytes == 2 * kMiB);
  CHECK(s.num_segments == 1);
  CHECK(s.num_splits == 2);
  CHECK(s.num_cache_hits == 1);
  a.deallocate(p, 1000);
  a.deallocate(q, 4096);
}

TEST_CASE("cuda allocator: freed neighbours merge into a larger block") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  char* x = alloc(a, 512 * kKiB);
  char* y = alloc(a, 512 * kKiB);
  char* z = alloc(a, 512 * kKiB);
  CHECK(y == x + 512 * kKiB);
  CHECK(z == y + 512 * kKiB);
  a.deallocate(y, 512 * kKiB);
  a.deallocate(x, 512 * kKiB);  // merges with y
  CHECK(a.memory_stats().num_merges >= 1);
  // 1 MiB fits only where x and y were: the free tail after z is 512 KiB.
  char* big = alloc(a, kMiB);
  CHECK(big == x);
  MemoryStats s = a.memory_stats();
  CHECK(s.num_segments == 1);
  CHECK(s.reserved_bytes == 2 * kMiB);
  a.deallocate(big, kMiB);
  a.deallocate(z, 512 * kKiB);  // the whole segment is one free block again
  a.empty_cache();
  CHECK(a.memory_stats().num_cuda_frees == 1);
}

TEST_CASE("cuda allocator: large requests get their own segments") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  char* small = alloc(a, 4096);
  char* medium = alloc(a, 5 * kMiB);     // a 20 MiB segment
  char* large = alloc(a, 30 * kMiB + 1);  // rounded up to 32 MiB
  MemoryStats s = a.memory_stats();
  CHECK(s.num_segments == 3);
  CHECK(s.reserved_bytes == 2 * kMiB + 20 * kMiB + 32 * kMiB);
  // The rest of the 20 MiB segment (15 MiB > 1 MiB) was split off and serves the next one.
  char* medium2 = alloc(a, 5 * kMiB);
  CHECK(medium2 == medium + 5 * kMiB);
  CHECK(a.memory_stats().num_segments == 3);
  // A small request never comes from a large segment.
  char* small2 = alloc(a, 4096);
  CHECK(small2 == small + 4096);
  for (char* p : {small, medium, large, medium2, small2}) a.deallocate(p, 0);
  a.empty_cache();
  CHECK(a.memory_stats().reserved_bytes == 0);
}

TEST_CASE("cuda allocator: each stream has its own pool") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  OwnedCudaStream s1, s2;
  void* p = nullptr;
  {
    CudaStreamGuard guard(s1);
    CHECK(current_stream() == s1.stream());
    p = a.allocate(2048);
    a.deallocate(p, 2048);
  }
  CHECK(current_stream() == CudaStream());  // the guard restored the default stream
  {
    CudaStreamGuard guard(s2);
    void* q = a.allocate(2048);  // s1's cached block is not s2's to take
    CHECK(q != p);
    CHECK(a.memory_stats().num_segments == 2);
    a.deallocate(q, 2048);
  }
  {
    CudaStreamGuard guard(s1);
    void* r = a.allocate(2048);
    CHECK(r == p);
    a.deallocate(r, 2048);
  }
  a.empty_cache();
  CHECK(a.memory_stats().reserved_bytes == 0);
}

TEST_CASE("cuda allocator: record_stream holds a block until the other stream's event completes") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  OwnedCudaStream side;
  bool side_done = false;
  a.set_event_query_for_testing([&](cudaEvent_t) { return side_done ? cudaSuccess : cudaErrorNotReady; });

  char* p = alloc(a, 4096);
  a.record_stream(p + 100, side.stream().handle());  // any address inside the block
  a.deallocate(p, 4096);
  MemoryStats s = a.memory_stats();
  CHECK(s.allocated_bytes == 0);
  CHECK(s.pending_free_bytes == 4096);

  char* q = alloc(a, 4096);  // the side stream may still read p: it must not come back
  CHECK(q != p);
  CHECK(a.memory_stats().pending_free_bytes == 4096);

  side_done = true;  // the side stream's work has finished
  char* r = alloc(a, 4096);
  CHECK(r == p);
  CHECK(a.memory_stats().pending_free_bytes == 0);
  a.deallocate(q, 4096);
  a.deallocate(r, 4096);

  // empty_cache waits for outstanding events, then gives everything back.
  side_done = false;
  char* t = alloc(a, 4096);
  a.record_stream(t, side.stream().handle());
  a.deallocate(t, 4096);
  CHECK(a.memory_stats().pending_free_bytes == 4096);
  a.empty_cache();
  s = a.memory_stats();
  CHECK(s.pending_free_bytes == 0);
  CHECK(s.reserved_bytes == 0);

  // With the runtime's own events (complete in the emulator once recorded).
  a.set_event_query_for_testing(nullptr);
  char* u = alloc(a, 4096);
  a.record_stream(u, side.stream().handle());
  a.record_stream(u, nullptr);  // its own stream: nothing to wait for
  a.deallocate(u, 4096);
  side.stream().synchronize();
  CHECK(alloc(a, 4096) == u);
  a.deallocate(u, 4096);

  CHECK_THROWS_WITH_AS(a.record_stream(u, side.stream().handle()), doctest::Contains("not inside a live allocation"),
                       Error);
  int host = 0;
  CHECK_THROWS_WITH_AS(record_stream(&host, nullptr), doctest::Contains("record_stream"), Error);
}

TEST_CASE("cuda allocator: empty_cache gives back segments without live blocks") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  void* keep = a.allocate(100);
  void* big = a.allocate(64 * kMiB);
  void* small = a.allocate(3 * kMiB);
  a.deallocate(big, 0);
  a.deallocate(small, 0);
  a.empty_cache();
  MemoryStats s = a.memory_stats();
  CHECK(s.reserved_bytes == 2 * kMiB);  // the segment of `keep` stays
  CHECK(s.num_segments == 1);
  a.deallocate(keep, 100);
  a.empty_cache();
  s = a.memory_stats();
  CHECK(s.reserved_bytes == 0);
  CHECK(s.num_segments == 0);
  CHECK(s.num_cuda_frees == 3);
  CHECK(s.peak_reserved_bytes == 2 * kMiB + 64 * kMiB + 20 * kMiB);
}

TEST_CASE("cuda allocator: peak tracking") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  void* p = a.allocate(kMiB);
  void* q = a.allocate(kMiB);
  a.deallocate(p, kMiB);
  a.deallocate(q, kMiB);
  void* r = a.allocate(512);
  MemoryStats s = a.memory_stats();
  CHECK(s.peak_allocated_bytes == 2 * kMiB);
  CHECK(s.allocated_bytes == 512);
  a.reset_peak_stats();
  CHECK(a.memory_stats().peak_allocated_bytes == 512);
  CHECK(a.stats().peak_allocated_bytes == 512);
  a.deallocate(r, 512);
}

TEST_CASE("cuda allocator: out of memory is a clear error and the allocator keeps working") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  void* live = a.allocate(4096);
  void* cached = a.allocate(64 * kMiB);
  a.deallocate(cached, 0);
  CHECK(a.memory_stats().reserved_bytes == 66 * kMiB);
  const size_t too_much = 200 * kGiB;  // the emulated device has 80 GiB
  CHECK_THROWS_WITH_AS(a.allocate(too_much), doctest::Contains("CUDA out of memory"), Error);
  try {
    a.allocate(too_much);
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("200.00 GiB") != std::string::npos);
    CHECK(what.find("214748364800 bytes") != std::string::npos);
    CHECK(what.find("allocated 4.00 KiB") != std::string::npos);
  }
  MemoryStats s = a.memory_stats();
  CHECK(s.num_ooms == 2);
  CHECK(s.reserved_bytes == 2 * kMiB);  // the retry gave the cached 64 MiB segment back
  CHECK(s.allocated_bytes == 4096);
  void* after = a.allocate(8 * kMiB);
  CHECK(after != nullptr);
  a.deallocate(after, 0);
  a.deallocate(live, 4096);
}

TEST_CASE("cuda allocator: blocks hold data (copies in and out, interior pointers)") {
  LOOM_REQUIRE_GPU();
  CudaCachingAllocator a;
  std::vector<int> in(300), out(300, 0);
  for (int i = 0; i < 300; ++i) in[i] = i * 7;
  char* x = alloc(a, 100);
  char* y = alloc(a, 300 * sizeof(int));  // a neighbour of x in the same segment
  REQUIRE(cudaMemcpy(y, in.data(), in.size() * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemset(x, 0xff, 100) == cudaSuccess);  // does not touch y
  REQUIRE(cudaMemcpy(out.data(), y, out.size() * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(out == in);
  a.deallocate(x, 100);
  a.deallocate(y, 0);
}

TEST_CASE("cuda tensors use the caching allocator") {
  LOOM_REQUIRE_GPU();
  const size_t before = memory_allocated();
  {
    Tensor t = empty({1000}, Device::cuda());  // 4000 bytes, a 4096-byte block
    CHECK(memory_allocated() == before + 4096);
    CHECK(memory_reserved() >= memory_allocated());
    CHECK(max_memory_allocated() >= before + 4096);
    Tensor view = t.slice(0, 10, 20);
    record_stream(view.data_ptr(), nullptr);  // an interior pointer of a live storage
    OwnedCudaStream side;
    record_stream(t.data_ptr(), side.stream().handle());
    side.stream().synchronize();
  }
  CHECK(memory_allocated() == before);
  MemoryStats s = memory_stats();
  CHECK(s.num_allocs >= 1);
  CHECK(get_allocator(DeviceType::CUDA)->stats().allocated_bytes == before);
  empty_cache();
  CHECK(memory_stats().pending_free_bytes == 0);
  if (before == 0) CHECK(memory_reserved() == 0);
}

TEST_CASE("cuda pinned host pool caches blocks by size class") {
  LOOM_REQUIRE_GPU();
  Allocator* pinned = host_allocator();
  CHECK(pinned->device() == kCPU);
  AllocatorStats before = pinned->stats();
  void* p = pinned->allocate(5000);  // an 8 KiB class
  static_cast<char*>(p)[4999] = 1;   // host memory: the host may write it
  CHECK(pinned->stats().allocated_bytes == before.allocated_bytes + 8192);
  pinned->deallocate(p, 5000);
  void* q = pinned->allocate(6000);  // same class
  CHECK(q == p);
  CHECK(pinned->stats().num_cache_hits == before.num_cache_hits + 1);
  pinned->deallocate(q, 6000);
  pinned->empty_cache();
  CHECK(pinned->stats().reserved_bytes == pinned->stats().allocated_bytes);
}

TEST_CASE("cuda streams and events") {
  LOOM_REQUIRE_GPU();
  OwnedCudaStream s;
  CudaEvent start(/*timing=*/true), end(/*timing=*/true);
  start.record(s);
  end.record(s);
  end.synchronize();
  CHECK(end.query());
  CHECK(s.stream().query());
  CHECK(start.elapsed_time(end) >= 0.0f);
  CudaEvent plain;
  plain.record();
  plain.block(s);
  CHECK_THROWS_AS(plain.elapsed_time(end), Error);  // not a timing event
  OwnedCudaStream moved = std::move(s);
  CHECK(moved.stream().handle() != nullptr);
  CHECK(s.stream().handle() == nullptr);
}

#endif  // LOOM_WITH_CUDA
