/*
 * The kernels of tests/cuda/emulator_kernels.h.
 */
#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "tests/cuda/emulator_kernels.h"

namespace loom::cuda::testing {

namespace {

__global__ void block_sum_kernel(const float* in, float* out, int n, Breakage breakage) {
  __shared__ float partials[32];
  float v = 0.0f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += in[blockIdx.x * n + i];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (breakage == Breakage::kEarlyReturn && threadIdx.x == 0) return;
  v = warp_reduce(v, SumOp{});
  if (lane == 0) partials[warp] = v;
  if (breakage == Breakage::kDivergentBarrier && threadIdx.x % 2 == 0) {
    __syncthreads();  // (broken on purpose) even threads wait here...
  } else if (breakage != Breakage::kSkipBarrier) {
    __syncthreads();  // ...and the others here: the partials of every warp are written
  }
  if (warp == 0) {
    float total = warp_reduce(lane < warps ? partials[lane] : 0.0f, SumOp{});
    if (lane == 0) out[blockIdx.x + (breakage == Breakage::kOutOfBounds ? gridDim.x : 0)] = total;
  }
}

__global__ void shuffle_kernel(int* out) {
  const int lane = threadIdx.x;
  const int v = lane * 10;
  out[lane] = __shfl_xor_sync(0xffffffffu, v, 1);
  out[32 + lane] = __shfl_down_sync(0xffffffffu, v, 3);
  out[64 + lane] = __shfl_up_sync(0xffffffffu, v, 2);
  out[96 + lane] = __shfl_sync(0xffffffffu, v, 7);
}

__global__ void shuffle_exited_kernel(int* out) {
  if (threadIdx.x == 31) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void vote_kernel(unsigned* out) {
  const int lane = threadIdx.x;
  unsigned ballot = __ballot_sync(0xffffffffu, lane % 3 == 0);
  int any = __any_sync(0xffffffffu, lane == 5);
  int all = __all_sync(0xffffffffu, lane < 31);
  if (lane == 0) out[0] = ballot, out[1] = static_cast<unsigned>(any), out[2] = static_cast<unsigned>(all);
  if (lane >= 16) return;
  __syncwarp(0x0000ffffu);  // lanes 16..31 have returned; the rest reconverge here
  unsigned active = __activemask();
  if (lane == 0) out[3] = active;
}

__global__ void atomic_kernel(int* counter, float* fcounter) {
  atomicAdd(counter, 1);
  atomicAdd(fcounter, 0.5f);
}

__global__ void trivial_kernel(int* p) {
  if (p && threadIdx.x == 0 && blockIdx.x == 0) *p = 1;
}

__global__ void shared_opt_in_kernel(int* p) {
  unsigned char* smem = dynamic_shared<unsigned char>();
  smem[threadIdx.x] = 1;
  __syncthreads();  // the byte above is written
  if (p && threadIdx.x == 0) *p = smem[0];
}

__global__ void barrier_kernel(int* flag) {
  __syncthreads();  // (misdeclared on purpose) the launch says the threads are independent
  if (threadIdx.x == 0) *flag = 1;
}

__global__ void stack_address_kernel(unsigned long long* address) {
  volatile int local = static_cast<int>(threadIdx.x);
  __syncthreads();  // every thread of the block has its local: each is on a stack of its own
  if (threadIdx.x == 1) *address = reinterpret_cast<unsigned long long>(&local);
}

}  // namespace

cudaError_t block_sum(const float* in, float* out, int n, int blocks, int threads, Breakage breakage) {
  if (breakage == Breakage::kShuffleExitedLane) {
    return launch<shuffle_exited_kernel>({1, 32}, reinterpret_cast<int*>(out));
  }
  return launch<block_sum_kernel>({static_cast<unsigned>(blocks), static_cast<unsigned>(threads)}, in, out, n, breakage);
}

cudaError_t warp_shuffles(int* out) { return launch<shuffle_kernel>({1, 32}, out); }

cudaError_t warp_votes(unsigned* out) { return launch<vote_kernel>({1, 32}, out); }

cudaError_t atomic_count(int* counter, float* fcounter, int blocks, int threads) {
  return launch<atomic_kernel>({static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, nullptr,
                                BlockThreads::kIndependent},
                               counter, fcounter);
}

cudaError_t configured_launch(dim3 grid, dim3 block, size_t shared_bytes, bool opt_in_shared) {
  if (shared_bytes == 0) return launch<trivial_kernel>({grid, block}, static_cast<int*>(nullptr));
  if (opt_in_shared) {
    cudaError_t e = cudaFuncSetAttribute(shared_opt_in_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes));
    if (e != cudaSuccess) return e;
  }
  return launch<shared_opt_in_kernel>({grid, block, shared_bytes}, static_cast<int*>(nullptr));
}

cudaError_t barrier_in_independent_kernel(int* flag) {
  return launch<barrier_kernel>({1, 64, 0, nullptr, BlockThreads::kIndependent}, flag);
}

cudaError_t stack_address(unsigned long long* address) { return launch<stack_address_kernel>({1, 64}, address); }

}  // namespace loom::cuda::testing
