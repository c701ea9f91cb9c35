/*
 * Small kernels that exercise the CUDA programming model itself (barriers, shared memory, warp
 * intrinsics, atomics, launch limits), for tests/cuda/test_emulator.cpp. They are valid CUDA
 * and run on a real GPU too; the "broken" variants break one rule on purpose, to show that the
 * emulator reports it (and, for the negative controls, that the sanitizers do).
 */
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace loom::cuda::testing {

enum class Breakage {
  kNone,
  kSkipBarrier,        // block_sum without the __syncthreads between writing and reading partials
  kDivergentBarrier,   // half the threads at one __syncthreads, half at another
  kEarlyReturn,        // thread 0 returns before a barrier the others wait at
  kShuffleExitedLane,  // a full-mask shuffle after lane 31 has returned
  kOutOfBounds,        // block_sum writes one element past the end of its output
};

// out[b] = sum of in[b * n .. b * n + n) for b < blocks, one block of `threads` each, with a
// shared-memory block reduction (warp shuffles, then one warp over the partials).
cudaError_t block_sum(const float* in, float* out, int n, int blocks, int threads, Breakage breakage);

// out[i] = lane i's value after each shuffle flavour, for one warp: in[i] = i * 10.
// Layout of out (4 x 32 ints): xor 1, down 3, up 2, broadcast from lane 7.
cudaError_t warp_shuffles(int* out);

// out[0] = __ballot_sync of (lane % 3 == 0), out[1] = __any_sync(lane == 5), out[2] = __all_sync(lane < 31),
// out[3] = __activemask() after lanes >= 16 have returned (from lane 0).
cudaError_t warp_votes(unsigned* out);

// counter[0] += 1 from every thread of a grid of `blocks` x `threads` (atomicAdd on int and float).
cudaError_t atomic_count(int* counter, float* fcounter, int blocks, int threads);

// A launch with the given configuration of a trivial kernel (for the limit checks).
cudaError_t configured_launch(dim3 grid, dim3 block, size_t shared_bytes, bool opt_in_shared);

// Writes 1 to *flag from a kernel that calls __syncthreads but is launched as independent.
cudaError_t barrier_in_independent_kernel(int* flag);

// *address = the address of a local variable of thread 1 of a 64-thread block that calls
// __syncthreads: in the emulated build, a place on that thread's fiber stack.
cudaError_t stack_address(unsigned long long* address);

}  // namespace loom::cuda::testing
