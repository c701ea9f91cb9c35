/*
 * The emulator's interface between the shadow CUDA headers (this folder) and its C++20
 * implementation (runtime.cpp, launch.cpp). Kernel code never calls these directly: it uses
 * the CUDA names (threadIdx, __syncthreads, __shfl_xor_sync, ...) that cuda_runtime.h maps
 * onto them, and launches through ops/cuda/launch.cuh.
 *
 * Execution model of one launch (launch.cpp):
 *   - Cooperative kernels (they may use __syncthreads, shared memory or warp intrinsics): the
 *     threads of a block are real OS threads that run concurrently, so a barrier is a real
 *     barrier and a missing one is a data race that ThreadSanitizer sees. Blocks run one after
 *     another, which makes a function-local `static` array a correct per-block __shared__.
 *   - Independent kernels (declared so at the launch: no communication inside a block): each
 *     block's threads run one after another on one OS thread, and blocks are spread over a few
 *     OS threads, so that races between blocks are still seen. A barrier, a warp intrinsic or
 *     dynamic shared memory in such a kernel is reported as an error.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cuda_runtime_api.h"

namespace loom_emu {

// Where a thread is: the built-in index variables of CUDA.
struct ThreadPosition {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
};
// The calling thread's position; outside a kernel, all zeros.
ThreadPosition& position();

enum class BlockThreads { kIndependent, kCooperative };

struct LaunchSpec {
  const char* kernel_name;  // for messages
  const void* kernel_id;    // the kernel's address (attributes set with cudaFuncSetAttribute)
  dim3 grid, block;
  size_t dynamic_shared_bytes;
  cudaStream_t stream;
  BlockThreads threads;
};

// Runs body() for every thread of every block, when the launch reaches its stream: at once, or
// at each launch of the graph that spec.stream is capturing (body holds copies of the kernel's
// arguments, as a real launch copies them). Throws loom::Error when the configuration is
// invalid, or a thread breaks a rule (mismatched barriers, a warp mask naming an inactive lane,
// a deadlock); returns the stream's error (an unknown stream, an invalidated capture).
cudaError_t launch(const LaunchSpec& spec, std::function<void()> body);

// Throws loom::Error unless p is null or points into a live cudaMalloc allocation.
void check_kernel_pointer(const char* kernel_name, int argument, const void* p);

// Block-level and warp-level primitives, called through the CUDA names.
void syncthreads(const char* file, int line);
void* dynamic_shared_memory();
unsigned warp_exchange(unsigned mask, uint64_t value, int source_lane, uint64_t* out, const char* what);
unsigned warp_vote(unsigned mask, bool predicate, const char* what);  // returns the ballot
unsigned active_mask();
void syncwarp(unsigned mask);

// Device memory bookkeeping used by the caching allocator in emulated ASan builds: bytes of a
// segment that no live block covers are poisoned, so a kernel that writes past its tensor is
// reported by AddressSanitizer.
void mark_device_bytes(const void* p, size_t n, bool usable);

// Installs the handler that names the allocation when host code touches device memory. The
// first cudaMalloc installs it; call it again after something else replaced the SIGSEGV handler
// (a test framework does, per test case).
void install_device_fault_handler();

}  // namespace loom_emu
