/*
 * CUDA kernels of cumsum and sort (ops/cuda/sort_launchers.h), on contiguous tensors seen as
 * [outer, size, inner] around the dim.
 *
 * cumsum: along an inner dim (inner > 1) one thread per column adds down it, neighbouring
 * threads reading neighbouring elements. Along the last dim a block scans one row in tiles of
 * blockDim elements: each warp scans its 32 with __shfl_up_sync, the warp totals are scanned
 * in shared memory, and the carry from the tiles before is added. Sums are kept in float64 for
 * float32/float64 and float32 for the 16-bit floats (as the CPU's; the order of the additions
 * differs from its left-to-right one), integers wrap.
 *
 * sort: one block per line runs a bitonic sorting network on (key, position) pairs, the line
 * padded to a power of two P with positions >= size that sort last. The pairs are ordered by
 * pair_before (ops/sort_order.h), a strict total order, so the network's result is exactly the
 * stable sort that the CPU computes. A line whose P pairs fit in 48 KB sorts in shared memory;
 * longer ones sort in a global scratch buffer of P pairs per line (the same network; each stage
 * then reads and writes L2).
 */
#include <type_traits>

#include "ops/cuda/device_utils.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/sort_launchers.h"
#include "ops/sort_order.h"

namespace loom::cuda {

namespace {

// ---- cumsum ---------------------------------------------------------------------------------

// The running-sum type (see the file comment); unsigned for integers, so that overflow wraps.
template <class T>
struct ScanAcc {
  using type = typename std::conditional<std::is_integral<T>::value, unsigned long long, double>::type;
};
template <>
struct ScanAcc<__half> {
  using type = float;
};
template <>
struct ScanAcc<__nv_bfloat16> {
  using type = float;
};
template <class T>
using scan_acc_t = typename ScanAcc<T>::type;

template <class T>
__device__ inline scan_acc_t<T> to_acc(T v) {
  if constexpr (std::is_integral<T>::value) {
    return static_cast<unsigned long long>(static_cast<long long>(v));
  } else {
    return static_cast<scan_acc_t<T>>(to_opmath(v));
  }
}

template <class T>
__device__ inline T from_acc(scan_acc_t<T> acc) {
  if constexpr (std::is_integral<T>::value) {
    return static_cast<T>(acc);  // modulo 2^bits
  } else {
    return convert<T>(static_cast<opmath_t<T>>(acc));
  }
}

// Along an inner dim: thread c owns column c of the outer * inner columns (kIndependent).
template <class T>
__global__ void cumsum_columns_kernel(T* out, const T* in, int64_t outer, int64_t size, int64_t inner) {
  const int64_t columns = outer * inner;
  for (int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; c < columns;
       c += int64_t{gridDim.x} * blockDim.x) {
    const int64_t base = (c / inner) * size * inner + c % inner;
    scan_acc_t<T> acc = 0;
    for (int64_t i = 0; i < size; ++i) {
      acc += to_acc(in[base + i * inner]);
      out[base + i * inner] = from_acc<T>(acc);
    }
  }
}

// Along the last dim: block b scans rows b, b + gridDim.x, ... (kCooperative; blockDim.x a
// multiple of 32; dynamic shared memory: 32 sums).
template <class T>
__global__ void cumsum_rows_kernel(T* out, const T* in, int64_t rows, int64_t size) {
  using Acc = scan_acc_t<T>;
  Acc* warp_sums = dynamic_shared<Acc>();  // the warps' totals, then their inclusive scan
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* src = in + row * size;
    T* dst = out + row * size;
    Acc carry = 0;  // the sum of the row's tiles before this one; equal in every thread
    for (int64_t tile = 0; tile < size; tile += blockDim.x) {
      const int64_t i = tile + threadIdx.x;
      Acc v = i < size ? to_acc(src[i]) : Acc{0};
      for (int offset = 1; offset < 32; offset *= 2) {  // inclusive scan of the warp's 32
        const Acc up = __shfl_up_sync(0xffffffffu, v, offset);
        if (lane >= offset) v += up;
      }
      if (lane == 31) warp_sums[warp] = v;
      __syncthreads();  // every warp's total is in warp_sums
      if (warp == 0) {
        Acc total = lane < warps ? warp_sums[lane] : Acc{0};
        for (int offset = 1; offset < 32; offset *= 2) {
          const Acc up = __shfl_up_sync(0xffffffffu, total, offset);
          if (lane >= offset) total += up;
        }
        if (lane < warps) warp_sums[lane] = total;  // inclusive: warps 0..lane
      }
      __syncthreads();  // the scanned warp totals are in warp_sums
      const Acc before = warp > 0 ? warp_sums[warp - 1] : Acc{0};
      if (i < size) dst[i] = from_acc<T>(carry + before + v);
      carry += warp_sums[warps - 1];
      __syncthreads();  // every thread has read warp_sums: the next tile may overwrite it
    }
  }
}

// ---- sort -----------------------------------------------------------------------------------

constexpr int64_t kSortSharedBytes = 48 * 1024;  // the default dynamic shared-memory limit

template <class T>
__device__ inline auto sort_key(T v) {
  return to_opmath(v);
}

// Sorts the P (a power of two) pairs (keys[i], pos[i]) of one line by pair_before with the
// bitonic network, with every thread of the block. Pairs whose pos >= size are padding: they
// sort after every element, in any direction, since pair_before compares only positions when
// one of them is padding (its key is never read).
template <class T>
__device__ void bitonic_sort(T* keys, int64_t* pos, int64_t padded, int64_t size, bool descending) {
  for (int64_t k = 2; k <= padded; k *= 2) {
    for (int64_t j = k / 2; j > 0; j /= 2) {
      for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
        const int64_t partner = i ^ j;
        if (partner <= i) continue;  // the pair belongs to its lower element's thread
        const int64_t pi = pos[i], pp = pos[partner];
        const bool pad = pi >= size || pp >= size;
        // Sub-sequences with bit k clear sort forwards, the others backwards.
        const bool partner_first =
            pad ? pp < pi : pair_before(sort_key(keys[partner]), pp, sort_key(keys[i]), pi, descending);
        const bool forwards = (i & k) == 0;
        if (partner_first == forwards) {
          const T key = keys[i];
          keys[i] = keys[partner];
          keys[partner] = key;
          pos[i] = pp;
          pos[partner] = pi;
        }
      }
      __syncthreads();  // every pair of this stage is compared: the next stage reads the results
    }
  }
}

// Block b sorts lines line_begin + b, + gridDim.x, ... (kCooperative). In shared memory
// (scratch == nullptr; dynamic shared memory: P positions, then P keys) or in scratch, P
// positions then P keys per block.
template <class T>
__global__ void sort_kernel(T* values, int64_t* indices, const T* in, int64_t size, int64_t inner,
                            int64_t line_begin, int64_t line_end, int64_t padded, bool descending,
                            char* scratch) {
  char* base_bytes = scratch != nullptr
                         ? scratch + blockIdx.x * padded * static_cast<int64_t>(sizeof(int64_t) + sizeof(T))
                         : dynamic_shared<char>();
  int64_t* pos = reinterpret_cast<int64_t*>(base_bytes);
  T* keys = reinterpret_cast<T*>(pos + padded);
  for (int64_t line = line_begin + blockIdx.x; line < line_end; line += gridDim.x) {
    const int64_t base = (line / inner) * size * inner + line % inner;
    for (int64_t i = threadIdx.x; i < padded; i += blockDim.x) {
      pos[i] = i;
      keys[i] = i < size ? in[base + i * inner] : T{};  // padding's key is never compared
    }
    __syncthreads();  // the line is loaded
    bitonic_sort(keys, pos, padded, size, descending);
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      values[base + i * inner] = keys[i];
      indices[base + i * inner] = pos[i];
    }
    __syncthreads();  // the line is written out: the next line may overwrite the buffers
  }
}

}  // namespace

// ---- launchers ------------------------------------------------------------------------------

cudaError_t launch_cumsum(void* out, const void* in, int dtype, int64_t outer, int64_t size, int64_t inner,
                          cudaStream_t stream) {
  if (outer * size * inner == 0) return cudaSuccess;
  return visit_numeric_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* o = static_cast<T*>(out);
    const T* x = static_cast<const T*>(in);
    if (inner > 1)
      return launch<cumsum_columns_kernel<T>>(grid_stride(outer * inner, stream), o, x, outer, size, inner);
    // A block of up to 512 threads a row: as many as the row has elements, rounded to warps.
    int64_t threads = 32;
    while (threads < size && threads < 512) threads *= 2;
    const unsigned blocks = static_cast<unsigned>(outer < 65535 ? outer : 65535);
    const LaunchConfig config{dim3(blocks), dim3(static_cast<unsigned>(threads)), 32 * sizeof(scan_acc_t<T>),
                              stream};
    return launch<cumsum_rows_kernel<T>>(config, o, x, outer, size);
  });
}

int64_t sort_padded_size(int64_t size) {
  int64_t p = 1;
  while (p < size) p *= 2;
  return p;
}

int64_t sort_scratch_bytes(int64_t size, int element_size) {
  return sort_padded_size(size) * (static_cast<int64_t>(sizeof(int64_t)) + element_size);
}

bool sort_fits_shared(int64_t size, int element_size) {
  return sort_scratch_bytes(size, element_size) <= kSortSharedBytes;
}

cudaError_t launch_sort(void* values, int64_t* indices, const void* in, int dtype, int64_t size,
                        int64_t inner, int64_t line_begin, int64_t line_end, bool descending, void* scratch,
                        cudaStream_t stream) {
  const int64_t lines = line_end - line_begin;
  if (lines <= 0 || size == 0) return cudaSuccess;
  const int64_t padded = sort_padded_size(size);
  // Half a thread per padded pair (each compares one pair a stage), 32 to 1024.
  int64_t threads = 32;
  while (threads < padded / 2 && threads < 1024) threads *= 2;
  return visit_code(dtype, [&](auto tag) {
    using T = decltype(tag);
    const size_t shared = scratch == nullptr ? static_cast<size_t>(sort_scratch_bytes(size, sizeof(T))) : 0;
    // With scratch, one block per line of this launch (the caller sized scratch for them all).
    const int64_t max_blocks = scratch == nullptr ? 65535 : lines;
    const unsigned blocks = static_cast<unsigned>(lines < max_blocks ? lines : max_blocks);
    const LaunchConfig config{dim3(blocks), dim3(static_cast<unsigned>(threads)), shared, stream};
    return launch<sort_kernel<T>>(config, static_cast<T*>(values), indices, static_cast<const T*>(in), size,
                                  inner, line_begin, line_end, padded, descending,
                                  static_cast<char*>(scratch));
  });
}

}  // namespace loom::cuda
